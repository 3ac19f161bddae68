//! The committed call's writer task and the batched send paths under attack, against the
//! scriptable h2 server on tokio's paused clock: back-pressure with a large message behind a partly written
//! one, a half-close (`finish`) followed by the server's early end, a sender dropped mid-write, an abort
//! while the writer holds data, a receiving half dropped while the writer waits, a deadline while the
//! sender waits for room, empty and 16 KiB messages, retries and hedging over batches, and the 64 KiB bound
//! on `send` behind a closed window before and after commit (a committed hedge's backlog included), with
//! the channel's count of unwritten request bytes. Then the writer task started at commit with a backlog:
//! ended by a server reset, a dropped connection or the deadline while the application only reads, a send
//! blocked on it released by a reset, the count back to 0 as soon as the call ends (the application still
//! holding both halves); messages over the bound before and after commit; numbered messages (index, then
//! filler) across retry, hedge and plain commits on two threads; and the bidi pump dropped or finishing
//! with a backlog.

use grpc_test_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Code, Request, RequestSender, Streaming};
use h2::Reason;
use support::channel_with_config;
use support::config::{hedging, retry};
use support::frames::{grpc_message, numbered, payloads};
use support::guards::{guarded, no_hang, settle, SETTLE_STEP};
use support::h2_server::{
    handler, reads_then_answers, reads_then_answers_with, trailers, H2Server, HeadersAt, Stream,
};
use support::h2_server::{small_window, Event, SMALL_WINDOW as WINDOW, SVC};
use support::shapes::{start_bidi, start_fed_bidi};

/// Sends each of `messages` (each bounded by the guard), expecting every send accepted.
async fn send_all(tx: &mut RequestSender<Bytes>, messages: &[Vec<u8>]) {
    for m in messages {
        guarded("send", tx.send(Bytes::from(m.clone())))
            .await
            .expect("send");
    }
}

/// Half-closes the request (`finish`), then reads the reply, which must be `done`.
async fn finish_then_done(tx: RequestSender<Bytes>, rx: &mut Streaming<Bytes>) {
    guarded("finish", tx.finish()).await.expect("finish");
    let reply = guarded("reply", rx.message()).await.expect("reply");
    assert_eq!(reply.as_deref(), Some(&b"done"[..]));
}

/// A server with a 1000-byte stream window that answers headers at once (the call commits), reads nothing
/// for 5 s, then reads the whole request and answers `done`, OK.
async fn slow_reader() -> H2Server {
    H2Server::tcp(
        small_window,
        reads_then_answers(HeadersAt::Start, Duration::from_secs(5)),
    )
    .await
}

/// Runs `f` on its own current-thread runtime with a paused clock, on its own thread, and fails if it has
/// not finished within `secs` seconds of real time. On the paused clock every scripted wait is instant, so a
/// test that needs real time is one whose tasks never let the runtime go idle (a busy loop between tasks
/// keeps the paused clock from advancing): the bound turns such a livelock into a failure instead of a hang.
fn within_real_time<F>(secs: u64, what: &'static str, f: F)
where
    F: FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> + Send + 'static,
{
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime");
        rt.block_on(f());
        let _ = done_tx.send(());
    });
    match done_rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!(
            "{what}: not done after {secs} s of real time on a paused clock whose scripted waits total 5 s: \
             the runtime never went idle (a busy loop), so the paused clock never advanced"
        ),
        Err(e) => panic!("{what}: the test thread failed: {e}"),
    }
}

/// Within 20 s of real time (see [`within_real_time`]), against a [`slow_reader`] that has committed the
/// call: A (two windows' worth, less its prefix) is sent and its first window written, then B of `b_len`
/// bytes (its send expected accepted, `b_queued`), then `finish`: the reply is `done`, and the server gets
/// A and B whole, in order, then one END_STREAM.
fn send_behind_a_partly_written_message(what: &'static str, b_len: usize, b_queued: &'static str) {
    within_real_time(20, what, move || {
        Box::pin(async move {
            let server = slow_reader().await;
            let ch = channel_with_config(&server.target(), "{}");
            let (mut tx, mut rx) = start_bidi(&ch).await;
            guarded("headers", rx.headers()).await.expect("committed");
            let a = vec![b'a'; 2 * WINDOW - 5];
            guarded("A", tx.send(Bytes::from(a.clone())))
                .await
                .expect("A queued");
            // Let the writer write A's first 1000 bytes (the window): 1000 bytes of it stay queued.
            settle(Duration::from_millis(100)).await;
            let b = vec![b'b'; b_len];
            guarded("B", tx.send(Bytes::from(b.clone())))
                .await
                .expect(b_queued);
            finish_then_done(tx, &mut rx).await;
            let (body, ends) = server.body_of_id(1);
            assert_eq!(ends, 1);
            assert_eq!(payloads(&body), vec![a, b]);
        })
    });
}

// Failed before the fix (livelock): After commit, a send of a message over 32 KiB while a smaller remainder (here 1000
// bytes of a partly written message) waits for flow control is refused room (queued + new > 64 KiB, not
// caught up); the sender wakes the writer task, which finds flow control still closed and, seeing at most
// 32 KiB queued, wakes the sender right back: the two tasks wake each other forever (a core at 100 %
// until the window opens; on tokio's paused clock time never advances, so the window never opens).
#[test]
fn a_large_send_behind_a_partly_written_message_waits_without_spinning() {
    send_behind_a_partly_written_message(
        "large send behind a partial write",
        64 << 10,
        "B queued once A is out",
    );
}

// Failed before the fix: `finish` marked the call half-closed before END_STREAM reaches h2. When the server then ends
// the call (trailers) while the writer still holds the request's tail behind flow control, the receiving
// half sees "half-closed" and sends no RST_STREAM(NO_ERROR), and the writer stops at the call's end without
// writing the tail or END_STREAM: the stream stays open on the client's side (occupying a stream slot of
// the server's MAX_CONCURRENT_STREAMS) for as long as the application holds the receiving half, and ends
// with RST_STREAM(CANCEL) only when it is dropped. Before this change (checked on efeffa0) `finish` waited
// for END_STREAM to be written, so the server that reads on after its trailers got the whole request and
// END_STREAM (and a call whose `finish` had not written END_STREAM yet answered early trailers with
// RST_STREAM(NO_ERROR)).
#[tokio::test(start_paused = true)]
async fn early_trailers_after_finish_still_end_the_request_stream() {
    let server = H2Server::tcp(
        small_window,
        handler(|mut s: Stream| async move {
            let Some(mut send) = s.headers() else {
                return;
            };
            // Lets the client queue its request and half-close, then ends the call without reading it.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = send.send_data(grpc_message(b"early"), false);
            let _ = send.send_trailers(trailers("0", &[]));
            // The client must now finish the request (END_STREAM) or reset it: both end up here.
            let _ = s.read_to_end().await;
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), "{}");
    let (mut tx, mut rx) = start_bidi(&ch).await;
    guarded("headers", rx.headers()).await.expect("committed");
    guarded("send", tx.send(Bytes::from(vec![b'a'; 3 * WINDOW])))
        .await
        .expect("queued");
    guarded("finish", tx.finish()).await.expect("finish");
    let reply = guarded("reply", rx.message()).await.expect("reply");
    assert_eq!(reply.as_deref(), Some(&b"early"[..]));
    assert!(guarded("end", rx.message()).await.expect("OK").is_none());
    // The application still holds the (finished) receiving half, as a caller reading its trailers does.
    let mut ended = false;
    for _ in 0..400 {
        let events = server.events();
        ended = events.iter().any(|e| {
            matches!(e, support::h2_server::Event::End { id: 1, .. })
                || matches!(e, support::h2_server::Event::Reset(r) if r.id == 1)
        });
        if ended {
            break;
        }
        tokio::time::sleep(SETTLE_STEP).await;
    }
    let resets: Vec<(u32, Reason)> = server.resets().iter().map(|r| (r.id, r.reason)).collect();
    assert!(
        ended,
        "2 s after the server's trailers the client neither finished nor reset its request stream \
         (resets {resets:?}); it stays open until the receiving half is dropped"
    );
    // Either the rest of the request and END_STREAM (what the client did before this change, once the
    // server read on) or RST_STREAM(NO_ERROR) (what it does without a `finish`) is fine; CANCEL is not.
    assert!(
        resets.iter().all(|r| *r == (1, Reason::NO_ERROR)),
        "early trailers: {resets:?}"
    );
    drop(rx);
}

/// The control for the livelock above: the same, with B small enough (30 KiB) that it fits beside A's
/// remainder, completes at once.
#[test]
fn a_send_that_fits_behind_a_partly_written_message_completes() {
    send_behind_a_partly_written_message("small send behind a partial write", 30 << 10, "B queued");
}

/// How stream `id` of connection `conn` ended at the server: END_STREAMs and reset reasons.
fn ends_of(server: &H2Server, conn: usize, id: u32) -> (usize, Vec<Reason>) {
    let events = server.events();
    let ends = events
        .iter()
        .filter(|e| matches!(e, Event::End { conn: c, id: i } if *c == conn && *i == id))
        .count();
    let resets = events
        .iter()
        .filter_map(|e| match e {
            Event::Reset(r) if r.conn == conn && r.id == id => Some(r.reason),
            _ => None,
        })
        .collect();
    (ends, resets)
}

/// Empty messages, messages framed at exactly 16 KiB and one byte over, and a run of small ones, sent after
/// commit behind a 1000-byte window; the sender is dropped while the writer is mid-message: the server gets
/// every message whole, in order, and one END_STREAM.
#[tokio::test(start_paused = true)]
async fn a_sender_dropped_mid_write_ends_the_request_once_with_every_message_whole() {
    let server = slow_reader().await;
    let ch = channel_with_config(&server.target(), "{}");
    let (mut tx, mut rx) = start_bidi(&ch).await;
    guarded("headers", rx.headers()).await.expect("committed");
    let mut messages = vec![
        vec![b'a'; 1995],
        Vec::new(),
        vec![b'c'; (16 << 10) - 5],
        Vec::new(),
        vec![b'e'; (16 << 10) - 4],
        vec![b'f'; (16 << 10) - 10],
    ];
    for i in 0..40u8 {
        messages.push(vec![i; 7 + usize::from(i) * 13]);
    }
    messages.push(Vec::new());
    for m in &messages {
        guarded("send", tx.send(Bytes::from(m.clone())))
            .await
            .expect("send");
        tokio::task::yield_now().await;
    }
    settle(Duration::from_millis(50)).await;
    drop(tx);
    let reply = guarded("reply", rx.message()).await.expect("reply");
    assert_eq!(reply.as_deref(), Some(&b"done"[..]));
    assert!(guarded("end", rx.message()).await.expect("OK").is_none());
    let (body, ends) = server.body_of_id(1);
    assert_eq!(ends, 1, "one END_STREAM");
    assert_eq!(payloads(&body), messages);
}

/// The bidi pump aborts the call (a message over the send limit) while the writer task still holds earlier
/// messages behind flow control: the stream is reset with CANCEL, never half-closed, and the receiving
/// half reports the sender's failure.
#[tokio::test(start_paused = true)]
async fn an_abort_while_the_writer_holds_messages_resets_and_never_half_closes() {
    let server = slow_reader().await;
    let ch = grpc_channel::Channel::builder(server.target())
        .default_service_config("{}")
        .service_config_lookup(false)
        .max_send_message_size(4096)
        .build()
        .expect("channel");
    let (feed, response) = start_fed_bidi(&ch).await;
    let mut rx = response.into_message();
    feed.send(vec![1; 2000]).expect("feed");
    feed.send(vec![2; 500]).expect("feed");
    settle(Duration::from_millis(50)).await;
    feed.send(vec![3; 5000]).expect("feed");
    let status = guarded("status", rx.message())
        .await
        .expect_err("over the limit");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    settle(Duration::from_secs(6)).await;
    let (ends, resets) = ends_of(&server, 1, 1);
    assert_eq!(
        (ends, resets),
        (0, vec![Reason::CANCEL]),
        "reset, never half-closed"
    );
}

/// The application drops the receiving half while the writer waits for flow control: the stream is reset
/// with CANCEL, the writer task ends (it is not left waiting on the stream), and a later send fails.
#[tokio::test(start_paused = true)]
async fn dropping_the_receiving_half_while_the_writer_waits_stops_the_writer() {
    let server = slow_reader().await;
    let ch = channel_with_config(&server.target(), "{}");
    let (mut tx, mut rx) = start_bidi(&ch).await;
    guarded("headers", rx.headers()).await.expect("committed");
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    guarded("A", tx.send(Bytes::from(vec![b'a'; 3000])))
        .await
        .expect("A queued");
    settle(Duration::from_millis(50)).await;
    let with_writer = metrics.num_alive_tasks();
    assert_eq!(with_writer, before + 1, "the writer task runs");
    drop(rx);
    settle(Duration::from_millis(50)).await;
    assert_eq!(metrics.num_alive_tasks(), before, "the writer task ended");
    let err = guarded("B", tx.send(Bytes::from_static(b"b")))
        .await
        .expect_err("the call ended");
    assert_ne!(err.code(), Code::Ok);
    settle(Duration::from_secs(6)).await;
    assert_eq!(ends_of(&server, 1, 1), (0, vec![Reason::CANCEL]));
}

/// The call's deadline passes while the sender waits for room (64 KiB queued behind a closed window): the
/// send returns DEADLINE_EXCEEDED at the deadline, the receiving half too, and the stream is reset.
#[tokio::test(start_paused = true)]
async fn the_deadline_ends_a_send_waiting_for_room() {
    let server = slow_reader().await;
    let ch = channel_with_config(&server.target(), "{}");
    let started = tokio::time::Instant::now();
    let (mut tx, mut rx) = guarded(
        "start",
        ch.streaming_raw(
            "/t.S/Bidi",
            Request::new(()).with_timeout(Duration::from_secs(2)),
        ),
    )
    .await
    .expect("start");
    guarded("headers", rx.headers()).await.expect("committed");
    guarded("A", tx.send(Bytes::from(vec![b'a'; WINDOW - 5])))
        .await
        .expect("A");
    guarded("F", tx.send(Bytes::from(vec![b'f'; 63 << 10])))
        .await
        .expect("F");
    let err = guarded("B", tx.send(Bytes::from(vec![b'b'; 2 << 10])))
        .await
        .expect_err("the deadline");
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(2) && elapsed < Duration::from_millis(2100),
        "{elapsed:?}"
    );
    let status = guarded("status", rx.message()).await.expect_err("deadline");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    settle(Duration::from_secs(6)).await;
    assert_eq!(ends_of(&server, 1, 1), (0, vec![Reason::CANCEL]));
}

/// The 40 x 1 KiB request, in one burst.
fn kilobytes() -> Vec<Vec<u8>> {
    (0..40u8).map(|i| vec![i; 1024]).collect()
}

/// A retry after the first attempt read part of a batched request (3000 bytes, then UNAVAILABLE): the second
/// attempt gets every message whole, in order, once, then END_STREAM; the first got a prefix of it.
#[tokio::test(start_paused = true)]
async fn a_retry_after_a_partly_read_batch_replays_every_message_whole() {
    let server = H2Server::tcp(
        support::h2_server::defaults,
        handler(|mut s: Stream| async move {
            if s.prev() == 0 {
                if s.read_bytes(3000).await.is_ok() {
                    s.trailers_only("14", &[]);
                    let _ = s.read_to_end().await;
                }
                return;
            }
            if s.read_to_end().await.is_ok() {
                s.ok(b"done");
            }
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), retry(3, &["UNAVAILABLE"]).service(SVC));
    let (mut tx, mut rx) = start_bidi(&ch).await;
    send_all(&mut tx, &kilobytes()).await;
    finish_then_done(tx, &mut rx).await;
    assert!(guarded("end", rx.message()).await.expect("OK").is_none());
    let full: Vec<u8> = kilobytes()
        .iter()
        .flat_map(|m| {
            let mut f = vec![0, 0, 0, 4, 0];
            f.extend_from_slice(m);
            f
        })
        .collect();
    let first = server.body(1, 1);
    assert!(first.len() >= 3000 && full.starts_with(&first), "a prefix");
    let (body, ends) = server.body_of_id(3);
    assert_eq!(ends, 1);
    assert_eq!(payloads(&body), kilobytes());
}

/// Hedging with two attempts at different paces: the original's window closes after 1000 bytes (it reads
/// nothing), the hedge reads everything and answers. The hedge gets every message whole, in order, once;
/// the original is cancelled.
#[tokio::test(start_paused = true)]
async fn hedged_attempts_at_different_paces_each_get_every_message_in_order() {
    let server = H2Server::tcp(
        small_window,
        handler(|mut s: Stream| async move {
            if s.prev() == 0 {
                s.wait_reset().await;
                return;
            }
            if s.read_to_end().await.is_ok() {
                s.ok(b"done");
            }
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), hedging(2, "0.1s").service(SVC));
    let (mut tx, mut rx) = start_bidi(&ch).await;
    // Both attempts open before the request comes.
    settle(Duration::from_millis(200)).await;
    send_all(&mut tx, &kilobytes()).await;
    finish_then_done(tx, &mut rx).await;
    assert!(guarded("end", rx.message()).await.expect("OK").is_none());
    settle(Duration::from_millis(200)).await;
    let (body, ends) = server.body_of_id(3);
    assert_eq!(ends, 1);
    assert_eq!(payloads(&body), kilobytes());
    assert_eq!(ends_of(&server, 1, 1), (0, vec![Reason::CANCEL]));
}

// Failed before the fix: the retry driver handed the state machine a whole batch (up to 16 KiB) before any attempt has
// written any of it, so when the retry buffer overflows inside the batch no attempt has reported progress
// on it: the tie goes to the earliest attempt, the stalled original, and the call waits on it until its
// deadline (DEADLINE_EXCEEDED). On efeffa0 (one message per turn, taken once an attempt had written the
// previous one) the hedge had sent three messages by then and won: this test passes there.
/// Hedging, both attempts open, a per-call retry buffer of 4 KiB, and a burst of 40 x 1 KiB: the original
/// reads nothing (its 1000-byte window closes inside the first message), the hedge reads everything. The
/// buffer overflows at the fourth message (A6 commit point 2) and the call commits to the attempt that has
/// sent the most, which is the hedge: the call completes with the hedge's answer.
#[tokio::test(start_paused = true)]
async fn a_buffer_overflow_inside_a_burst_commits_to_the_attempt_that_is_ahead() {
    let server = H2Server::tcp(
        small_window,
        handler(|mut s: Stream| async move {
            if s.prev() == 0 {
                s.wait_reset().await;
                return;
            }
            if s.read_to_end().await.is_ok() {
                s.ok(b"done");
            }
        }),
    )
    .await;
    let ch = grpc_channel::Channel::builder(server.target())
        .default_service_config(hedging(2, "0.1s").service(SVC))
        .service_config_lookup(false)
        .per_rpc_buffer_limit(4096)
        .build()
        .expect("channel");
    let (mut tx, mut rx) = guarded(
        "start",
        ch.streaming_raw(
            "/t.S/Bidi",
            Request::new(()).with_timeout(Duration::from_secs(10)),
        ),
    )
    .await
    .expect("start");
    // Both attempts open before the request comes.
    settle(Duration::from_millis(200)).await;
    assert_eq!(
        server.opens().len(),
        2,
        "the original and the hedge are open"
    );
    send_all(&mut tx, &kilobytes()).await;
    guarded("finish", tx.finish()).await.expect("finish");
    let reply = guarded("reply", rx.message()).await;
    assert!(
        matches!(&reply, Ok(Some(r)) if r.as_ref() == b"done"),
        "the call committed to the original, which had sent nothing more than the hedge: {reply:?}"
    );
}

/// The server resets the stream (RST_STREAM(INTERNAL_ERROR)) after 1000 bytes while the writer holds the
/// rest of the request: a later send fails (none hangs), and the receiving half reports the reset.
#[tokio::test(start_paused = true)]
async fn a_server_reset_while_the_writer_holds_data_fails_a_later_send() {
    let server = H2Server::tcp(
        small_window,
        handler(|mut s: Stream| async move {
            let Some(_send) = s.headers() else {
                return;
            };
            if s.read_bytes(WINDOW).await.is_ok() {
                tokio::time::sleep(Duration::from_secs(1)).await;
                s.respond.send_reset(Reason::INTERNAL_ERROR);
            }
            tokio::time::sleep(Duration::from_secs(30)).await;
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), "{}");
    let (mut tx, mut rx) = start_bidi(&ch).await;
    guarded("headers", rx.headers()).await.expect("committed");
    let mut failed = None;
    for i in 0..200 {
        match guarded("send", tx.send(Bytes::from(vec![b'x'; 4000]))).await {
            Ok(()) => {}
            Err(status) => {
                failed = Some((i, status));
                break;
            }
        }
    }
    let (i, status) = failed.expect("a send failed after the reset");
    assert!(
        i <= 17,
        "the 64 KiB limit held the sender back: failed at send {i}"
    );
    assert_ne!(status.code(), Code::Ok);
    let status = guarded("status", rx.message()).await.expect_err("reset");
    assert_eq!(status.code(), Code::Internal, "{status:?}");
}

/// The server ends the call with trailers (no reset, reading nothing) while the sender waits for room: a
/// receiving half that reads on meanwhile sees the end, and the waiting send is released with an error.
#[tokio::test(start_paused = true)]
async fn trailers_release_a_sender_waiting_for_room_when_the_response_is_read() {
    let server = H2Server::tcp(
        small_window,
        handler(|mut s: Stream| async move {
            let Some(mut send) = s.headers() else {
                return;
            };
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = send.send_trailers(trailers("8", &[]));
            tokio::time::sleep(Duration::from_secs(30)).await;
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), "{}");
    let (mut tx, mut rx) = start_bidi(&ch).await;
    guarded("headers", rx.headers()).await.expect("committed");
    let sending = async {
        for _ in 0..200 {
            if tx.send(Bytes::from(vec![b'x'; 4000])).await.is_err() {
                return true;
            }
        }
        false
    };
    let (released, status) = guarded("both", async { tokio::join!(sending, rx.message()) }).await;
    assert!(released, "a send failed once the call ended");
    assert_eq!(
        status.expect_err("RESOURCE_EXHAUSTED").code(),
        Code::ResourceExhausted
    );
}

/// The interop server's FullDuplexCall answers a lone request at once (ping-pong: the client waits for each
/// answer before the next request), and answers queued before a failing request go out before its status.
#[tokio::test(start_paused = true)]
async fn the_interop_full_duplex_call_answers_a_lone_request_and_flushes_before_a_failure() {
    use interop_proto::StreamingOutputCallResponse as Resp;
    use interop_proto::{paths, EchoStatus, ResponseParameters, StreamingOutputCallRequest};
    let addr = support::interop_server().await;
    let ch = support::channel(addr);
    let req = |size: i32, fail: bool| StreamingOutputCallRequest {
        response_parameters: vec![ResponseParameters {
            size,
            ..Default::default()
        }],
        response_status: fail.then(|| EchoStatus {
            code: 9,
            message: "stop".into(),
        }),
        ..Default::default()
    };
    let (mut tx, mut rx) = guarded(
        "start",
        ch.streaming::<StreamingOutputCallRequest, Resp>(paths::FULL_DUPLEX_CALL, Request::new(())),
    )
    .await
    .expect("start");
    for size in [1, 100, 20_000, 3] {
        guarded("send", tx.send(req(size, false)))
            .await
            .expect("send");
        let r = guarded("answer", rx.message())
            .await
            .expect("answer")
            .expect("one");
        assert_eq!(r.payload.map(|p| p.body.len()), Some(size as usize));
    }
    // Two requests at once, then a failing one: both answers, then FAILED_PRECONDITION.
    guarded("send", tx.send(req(10, false)))
        .await
        .expect("send");
    guarded("send", tx.send(req(11, false)))
        .await
        .expect("send");
    guarded("send", tx.send(req(12, true))).await.expect("send");
    for size in [10, 11] {
        let r = guarded("answer", rx.message())
            .await
            .expect("answer")
            .expect("one");
        assert_eq!(r.payload.map(|p| p.body.len()), Some(size));
    }
    let status = guarded("status", rx.message()).await.expect_err("failed");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
}

/// Messages queued before commit behind a closed window (the attempt holds most of them), then the server's
/// headers commit the call while they wait, then more messages after commit (the writer task), then
/// `finish`: the server, reading only after 5 s, gets every message once, whole, in order, then one
/// END_STREAM.
#[tokio::test(start_paused = true)]
async fn messages_queued_at_the_hand_over_and_after_it_arrive_in_order() {
    let server = H2Server::tcp(
        small_window,
        reads_then_answers(
            HeadersAt::After(Duration::from_secs(1)),
            Duration::from_secs(4),
        ),
    )
    .await;
    let ch = channel_with_config(&server.target(), retry(3, &["UNAVAILABLE"]).service(SVC));
    let (mut tx, mut rx) = start_bidi(&ch).await;
    let before: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 1000 + usize::from(i)]).collect();
    send_all(&mut tx, &before).await;
    guarded("headers", rx.headers()).await.expect("committed");
    let after: Vec<Vec<u8>> = (50..120u8)
        .map(|i| vec![i; 700 + usize::from(i) * 3])
        .collect();
    send_all(&mut tx, &after).await;
    finish_then_done(tx, &mut rx).await;
    assert!(guarded("end", rx.message()).await.expect("OK").is_none());
    let (body, ends) = server.body_of_id(1);
    assert_eq!(ends, 1);
    let expected: Vec<Vec<u8>> = before.into_iter().chain(after).collect();
    assert_eq!(payloads(&body), expected);
}

/// Many calls at once on a multi-threaded runtime, each sending messages of assorted sizes (empty, around
/// 16 KiB, up to 40 KiB) with and without yielding, against a server with a 1000-byte stream window: every
/// request arrives whole and in order with one END_STREAM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_with_assorted_sizes_arrive_whole_on_a_multi_threaded_runtime() {
    fn sizes(call: usize) -> Vec<usize> {
        let mut x = call as u64 * 2_654_435_761 + 1;
        (0..60)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                match x % 7 {
                    0 => 0,
                    1 => (16 << 10) - 5,
                    2 => (16 << 10) - 4,
                    3 => (x % 40_000) as usize,
                    _ => (x % 1500) as usize,
                }
            })
            .collect()
    }
    let server = H2Server::tcp(
        small_window,
        handler(|mut s: Stream| async move {
            let Some(mut send) = s.headers() else {
                return;
            };
            if s.read_to_end().await.is_err() {
                return;
            }
            let _ = send.send_data(grpc_message(b"read"), false);
            let _ = send.send_trailers(trailers("0", &[]));
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), "{}");
    let mut calls = Vec::new();
    for call in 0..16usize {
        let ch = ch.clone();
        calls.push(tokio::spawn(async move {
            let (mut tx, mut rx) = ch
                .streaming_raw(&format!("/t.S/C{call}"), Request::new(()))
                .await
                .expect("start");
            if call % 2 == 0 {
                rx.headers().await.expect("headers");
            }
            for (i, n) in sizes(call).into_iter().enumerate() {
                tx.send(Bytes::from(vec![(i % 251) as u8; n]))
                    .await
                    .expect("send");
                if i % 3 == call % 3 {
                    tokio::task::yield_now().await;
                }
            }
            if call % 4 < 2 {
                tx.finish().await.expect("finish");
            } else {
                drop(tx);
            }
            while rx.message().await.expect("OK").is_some() {}
        }));
    }
    for c in calls {
        tokio::time::timeout(Duration::from_secs(60), c)
            .await
            .expect("no hang")
            .expect("call");
    }
    for call in 0..16usize {
        let id = server
            .opens()
            .iter()
            .find(|o| o.path == format!("/t.S/C{call}"))
            .map(|o| (o.conn, o.id))
            .expect("opened");
        let body = server.body(id.0, id.1);
        let expected: Vec<Vec<u8>> = sizes(call)
            .into_iter()
            .enumerate()
            .map(|(i, n)| vec![(i % 251) as u8; n])
            .collect();
        assert_eq!(payloads(&body), expected, "call {call}");
        let ends = server
            .events()
            .iter()
            .filter(|e| matches!(e, Event::End { conn, id: i, .. } if *conn == id.0 && *i == id.1))
            .count();
        assert_eq!(ends, 1, "call {call}");
    }
}

/// What `RequestSender::send` may hold ahead of HTTP/2 flow control (its doc and the README): 64 KiB.
const SEND_AHEAD: usize = 64 << 10;

/// Server settings whose stream window is 0: no request DATA is ever let out.
fn closed_window(b: &mut h2::server::Builder) {
    b.initial_window_size(0);
}

/// Server settings with a connection window of 8 MiB, so that one stream the server leaves unread (its
/// 64 KiB stream window full) does not hold back another it reads.
fn wide_connection_window(b: &mut h2::server::Builder) {
    b.initial_connection_window_size(8 << 20);
}

/// Sends 1 KiB messages until a send waits (1 s on the paused clock, which passes only once every task is
/// idle): the framed bytes accepted (at most 2,000 messages).
async fn accepted_until_blocked(tx: &mut grpc_channel::RequestSender<Bytes>) -> usize {
    let mut accepted = 0;
    for _ in 0..2000 {
        let send = tx.send(Bytes::from(vec![b'm'; 1024]));
        match tokio::time::timeout(Duration::from_secs(1), send).await {
            Ok(result) => {
                result.expect("send");
                accepted += 1024 + 5;
            }
            Err(_) => break,
        }
    }
    accepted
}

/// Holds a stream it has answered with response headers, reading nothing, until the client resets it, and
/// logs the reset; the handler's task then lingers (60 s), so that the tests' task counts see only the
/// client's tasks end.
async fn hold_after_headers(s: &mut Stream) {
    let Some(mut send) = s.headers() else { return };
    if let Ok(reason) = std::future::poll_fn(|cx| send.poll_reset(cx)).await {
        s.log_reset(reason);
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
}

// Failed before the fix: "send accepted 80262 bytes before commit and 64827 more after it": before commit the inbox's
// 64 KiB did not count the batch the attempt held, and at commit the attempt's unwritten messages and the
// inbox went to h2 whole, so the send queue looked empty.
/// With a retry policy and a server whose stream window stays at 0, `send` accepts at most 64 KiB before
/// the call commits, and nothing more once the server's response headers commit it: the bound holds for
/// the whole call.
#[tokio::test(start_paused = true)]
async fn send_stays_within_64_kib_of_a_closed_window_before_and_after_commit() {
    let commit = std::sync::Arc::new(tokio::sync::Notify::new());
    let c = commit.clone();
    let server = H2Server::tcp(
        closed_window,
        handler(move |mut s: Stream| {
            let c = c.clone();
            async move {
                c.notified().await;
                hold_after_headers(&mut s).await;
            }
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), retry(3, &["UNAVAILABLE"]).service(SVC));
    let (mut tx, mut rx) = start_bidi(&ch).await;
    let before = accepted_until_blocked(&mut tx).await;
    commit.notify_one();
    guarded("headers", rx.headers()).await.expect("committed");
    let after = accepted_until_blocked(&mut tx).await;
    assert!(
        before <= SEND_AHEAD && before + after <= SEND_AHEAD,
        "with the window at 0, send accepted {before} bytes before commit and {after} more after it: more \
         than {SEND_AHEAD} ahead of flow control"
    );
    assert!(before > SEND_AHEAD - 2 * (1024 + 5), "{before}");
}

/// What a call committed by [`committed_to_a_stalled_hedge`] has not written: its 700 messages but the
/// hedge's stream window (65,535 bytes), which is all the hedge could write.
const HEDGE_UNSENT: usize = 700 * (1024 + 5) - 65_535;

/// A hedged call, both attempts open on one connection: the original reads everything, the hedge reads
/// nothing (its 64 KiB stream window fills) until the test lets it answer response headers, committing
/// the call to it. Returns the call, once committed, with 700 KiB sent: [`HEDGE_UNSENT`] of it unwritten.
async fn committed_to_a_stalled_hedge() -> (
    H2Server,
    grpc_channel::Channel,
    grpc_channel::RequestSender<Bytes>,
    grpc_channel::Streaming<Bytes>,
) {
    let commit = std::sync::Arc::new(tokio::sync::Notify::new());
    let c = commit.clone();
    let server = H2Server::tcp(
        wide_connection_window,
        handler(move |mut s: Stream| {
            let c = c.clone();
            async move {
                if s.prev() == 0 {
                    let _ = s.read_to_end().await;
                    return;
                }
                c.notified().await;
                hold_after_headers(&mut s).await;
            }
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), hedging(2, "0.1s").service(SVC));
    let (mut tx, mut rx) = start_bidi(&ch).await;
    settle(Duration::from_millis(200)).await;
    assert_eq!(
        server.opens().len(),
        2,
        "the original and the hedge are open"
    );
    for _ in 0..700 {
        guarded("send", tx.send(Bytes::from(vec![b'h'; 1024])))
            .await
            .expect("send");
    }
    settle(Duration::from_millis(100)).await;
    commit.notify_one();
    guarded("headers", rx.headers())
        .await
        .expect("committed to the hedge");
    (server, ch, tx, rx)
}

// Failed before the fix: "send still accepted 64827 bytes" after commit: the hedge's ~640 KiB backlog had gone to h2
// whole at commit, leaving the send queue empty.
/// A call committed to a hedge that has hundreds of KiB it could not write yet (its window is full)
/// accepts no more messages until that backlog has drained below the bound.
#[tokio::test(start_paused = true)]
async fn a_call_committed_to_a_stalled_hedge_accepts_nothing_more_at_once() {
    let (_server, _ch, mut tx, rx) = committed_to_a_stalled_hedge().await;
    let after = accepted_until_blocked(&mut tx).await;
    assert_eq!(
        after, 0,
        "committed with at least {HEDGE_UNSENT} bytes unsent behind flow control, send still accepted \
         {after} bytes"
    );
    drop((tx, rx));
}

// Failed before the fix (the counter over the old hand-over): "the channel counts 0" while the call held the hedge's
// ~640 KiB backlog: at commit it left the retry buffer for h2, which held it uncounted.
/// The bytes a call committed to a stalled hedge has not written yet stay counted, in the channel's
/// `unsent_request_bytes` (the retry buffer freed them at commit), until the call is gone.
#[tokio::test(start_paused = true)]
async fn a_committed_backlog_stays_counted_until_the_call_is_gone() {
    let (_server, ch, tx, rx) = committed_to_a_stalled_hedge().await;
    settle(Duration::from_millis(100)).await;
    let counted = ch.stats().unsent_request_bytes as usize;
    assert!(
        counted >= HEDGE_UNSENT,
        "the committed call holds at least {HEDGE_UNSENT} bytes that flow control has not let out, the \
         channel counts {counted}"
    );
    drop((tx, rx));
    settle(Duration::from_millis(100)).await;
    assert_eq!(
        ch.stats().unsent_request_bytes,
        0,
        "the call is gone, its unsent bytes too"
    );
}

/// A bidi call on a server whose window stays at 0 and that answers response headers after 1 s: the
/// client queues `backlog` 1 KiB messages before commit (none can leave), so at commit the writer task
/// starts with all of them. Returns the server, the channel and the call, committed.
async fn committed_with_a_backlog(
    server_handler: support::h2_server::Handler,
    backlog: usize,
    timeout: Option<Duration>,
) -> (
    H2Server,
    grpc_channel::Channel,
    grpc_channel::RequestSender<Bytes>,
    grpc_channel::Streaming<Bytes>,
) {
    let server = H2Server::tcp(closed_window, server_handler).await;
    let ch = channel_with_config(&server.target(), retry(3, &["UNAVAILABLE"]).service(SVC));
    let mut req = Request::new(());
    if let Some(t) = timeout {
        req = req.with_timeout(t);
    }
    let (mut tx, mut rx) = guarded("start", ch.streaming_raw("/t.S/Bidi", req))
        .await
        .expect("start");
    for i in 0..backlog {
        guarded("send", tx.send(Bytes::from(numbered(i as u32, 1020))))
            .await
            .expect("send before commit");
    }
    guarded("headers", rx.headers()).await.expect("committed");
    settle(Duration::from_millis(50)).await;
    (server, ch, tx, rx)
}

/// A server that answers response headers after 1 s (the window still 0), then after 2 s more ends the
/// call with `end`.
fn headers_then(end: fn(&mut Stream, h2::SendStream<Bytes>)) -> support::h2_server::Handler {
    handler(move |mut s: Stream| async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(send) = s.headers() else { return };
        tokio::time::sleep(Duration::from_secs(2)).await;
        end(&mut s, send);
        tokio::time::sleep(Duration::from_secs(60)).await;
    })
}

// Failed before the fix: "the call has ended (RESOURCE_EXHAUSTED, its stream reset), yet the channel still
// counts its unwritten backlog": left 61740, right 0. The ended call's send half kept its queue (and the
// gauge its count) until both halves were dropped.
/// The call ends (the server's status) while the committed call still holds its backlog and the
/// application keeps both halves (as one that stores them in a struct does): the channel's
/// `unsent_request_bytes` must not keep counting bytes that a call which has ended will never write, and
/// the call must not keep them in memory.
#[tokio::test(start_paused = true)]
async fn an_ended_call_holds_no_unsent_bytes_while_the_application_keeps_its_halves() {
    let (_server, ch, mut tx, mut rx) = committed_with_a_backlog(
        headers_then(|_, mut send| {
            let _ = send.send_trailers(trailers("8", &[]));
        }),
        60,
        None,
    )
    .await;
    let counted = ch.stats().unsent_request_bytes;
    assert!(counted >= 60 * 1029, "the backlog is counted: {counted}");
    let status = guarded("status", rx.message())
        .await
        .expect_err("RESOURCE_EXHAUSTED");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(tx.send(Bytes::from_static(b"late")).await.is_err());
    settle(Duration::from_millis(100)).await;
    assert_eq!(
        ch.stats().unsent_request_bytes,
        0,
        "the call has ended (RESOURCE_EXHAUSTED, its stream reset), yet the channel still counts its unwritten \
         backlog as held by a committed call"
    );
    drop((tx, rx));
    assert_eq!(ch.stats().unsent_request_bytes, 0);
}

/// The writer task started at commit waits for flow control with the backlog while the application only
/// awaits the response (no further send wakes anything): the server resets the stream. The call ends with
/// the reset's status, the writer task ends (task count), and the count returns to 0 once the halves go.
#[tokio::test(start_paused = true)]
async fn a_server_reset_ends_the_writer_started_at_commit_while_the_application_only_reads() {
    let (server, ch, tx, mut rx) = committed_with_a_backlog(
        headers_then(|s, _| s.respond.send_reset(Reason::INTERNAL_ERROR)),
        60,
        None,
    )
    .await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let with_writer = metrics.num_alive_tasks();
    let status = guarded("status", rx.message()).await.expect_err("reset");
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    settle(Duration::from_millis(100)).await;
    assert_eq!(
        metrics.num_alive_tasks(),
        with_writer - 1,
        "the writer task ended"
    );
    drop((tx, rx));
    settle(Duration::from_millis(50)).await;
    assert_eq!(ch.stats().unsent_request_bytes, 0);
    assert_eq!(ends_of(&server, 1, 1).0, 0, "never half-closed");
}

/// Same, the server's connection dropped (no reset, no GOAWAY): the call ends UNAVAILABLE, the writer task
/// ends.
#[tokio::test(start_paused = true)]
async fn a_dropped_connection_ends_the_writer_started_at_commit() {
    let (server, ch, tx, mut rx) = committed_with_a_backlog(
        handler(|mut s: Stream| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            hold_after_headers(&mut s).await;
        }),
        60,
        None,
    )
    .await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let with_writer = metrics.num_alive_tasks();
    server.kill();
    let status = guarded("status", rx.message()).await.expect_err("gone");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    settle(Duration::from_millis(200)).await;
    assert!(
        metrics.num_alive_tasks() < with_writer,
        "the writer task ended ({} tasks, {with_writer} with it)",
        metrics.num_alive_tasks()
    );
    drop((tx, rx));
    settle(Duration::from_millis(50)).await;
    assert_eq!(ch.stats().unsent_request_bytes, 0);
}

/// The deadline passes while the writer started at commit holds the backlog and the application only
/// awaits the response: DEADLINE_EXCEEDED at the deadline, the stream reset with CANCEL (never
/// half-closed), the writer task gone.
#[tokio::test(start_paused = true)]
async fn the_deadline_ends_a_call_whose_writer_holds_the_committed_backlog() {
    let started = tokio::time::Instant::now();
    let (server, ch, tx, mut rx) = committed_with_a_backlog(
        handler(|mut s: Stream| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            hold_after_headers(&mut s).await;
        }),
        60,
        Some(Duration::from_secs(3)),
    )
    .await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let with_writer = metrics.num_alive_tasks();
    let status = guarded("status", rx.message()).await.expect_err("deadline");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(3) && elapsed < Duration::from_millis(3100),
        "{elapsed:?}"
    );
    settle(Duration::from_millis(100)).await;
    assert_eq!(
        metrics.num_alive_tasks(),
        with_writer - 1,
        "the writer ended"
    );
    assert_eq!(ends_of(&server, 1, 1), (0, vec![Reason::CANCEL]));
    drop((tx, rx));
    assert_eq!(ch.stats().unsent_request_bytes, 0);
}

/// A sender blocked on the bound after commit (the backlog at 64 KiB, window 0) is released with an error
/// when the server resets the stream, without the application reading the response.
#[tokio::test(start_paused = true)]
async fn a_send_blocked_on_the_committed_backlog_fails_when_the_server_resets() {
    let (_server, _ch, mut tx, _rx) = committed_with_a_backlog(
        headers_then(|s, _| s.respond.send_reset(Reason::REFUSED_STREAM)),
        62,
        None,
    )
    .await;
    let mut failed = None;
    for i in 0..100u32 {
        if let Err(status) = guarded("send", tx.send(Bytes::from(numbered(1000 + i, 1020)))).await {
            failed = Some(status);
            break;
        }
    }
    let status = failed.expect("a send fails once the stream is reset");
    assert_ne!(status.code(), Code::Ok);
}

/// The application's sender is dropped before commit with messages the attempt could not write (window
/// 1000, the server reads nothing until after commit): the first attempt fails UNAVAILABLE after reading
/// 3000 bytes, the retry commits, and the server gets every message once, in order, then exactly one
/// END_STREAM; the first attempt never saw END_STREAM.
#[tokio::test(start_paused = true)]
async fn a_sender_dropped_before_commit_half_closes_after_the_whole_backlog_on_the_retry() {
    let server = H2Server::tcp(
        small_window,
        handler(|mut s: Stream| async move {
            if s.prev() == 0 {
                if s.read_bytes(3000).await.is_ok() {
                    s.trailers_only("14", &[]);
                }
                let _ = s.read_to_end().await;
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            let Some(mut send) = s.headers() else { return };
            tokio::time::sleep(Duration::from_secs(2)).await;
            if s.read_to_end().await.is_ok() {
                let _ = send.send_data(grpc_message(b"done"), false);
                let _ = send.send_trailers(trailers("0", &[]));
            }
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), retry(3, &["UNAVAILABLE"]).service(SVC));
    let (mut tx, mut rx) = start_bidi(&ch).await;
    let messages: Vec<Vec<u8>> = (0..60u32).map(|i| numbered(i, 990 + i as usize)).collect();
    send_all(&mut tx, &messages).await;
    drop(tx);
    let reply = guarded("reply", rx.message()).await.expect("reply");
    assert_eq!(reply.as_deref(), Some(&b"done"[..]));
    assert!(guarded("end", rx.message()).await.expect("OK").is_none());
    let opens = server.opens();
    assert_eq!(opens.len(), 2, "one retry");
    let (c, id) = (opens[1].conn, opens[1].id);
    assert_eq!(payloads(&server.body(c, id)), messages);
    assert_eq!(ends_of(&server, c, id).0, 1, "one END_STREAM");
    assert_eq!(
        ends_of(&server, opens[0].conn, opens[0].id).0,
        0,
        "the failed attempt never half-closed"
    );
    assert_eq!(ch.stats().unsent_request_bytes, 0);
}

/// Messages larger than the bound, after commit, behind a 1000-byte window the server reads late: each is
/// accepted only once the call holds nothing else, so the call never holds more than the largest message
/// (the channel's count, sampled on the paused clock, says so), and all arrive whole, in order, with one
/// END_STREAM after `finish`.
#[tokio::test(start_paused = true)]
async fn messages_over_the_bound_after_commit_go_one_at_a_time() {
    let server = H2Server::tcp(
        small_window,
        reads_then_answers(HeadersAt::Start, Duration::from_secs(1)),
    )
    .await;
    let ch = channel_with_config(&server.target(), "{}");
    let (mut tx, mut rx) = start_bidi(&ch).await;
    guarded("headers", rx.headers()).await.expect("committed");
    let messages: Vec<Vec<u8>> = (0..12u32)
        .map(|i| numbered(i, if i % 3 == 0 { 100 << 10 } else { 700 }))
        .collect();
    let max_seen = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (ch, max_seen) = (ch.clone(), max_seen.clone());
        tokio::spawn(async move {
            for _ in 0..100_000 {
                let now = ch.stats().unsent_request_bytes as usize;
                max_seen.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    send_all(&mut tx, &messages).await;
    finish_then_done(tx, &mut rx).await;
    sampler.abort();
    let (body, ends) = server.body_of_id(1);
    assert_eq!(ends, 1);
    assert_eq!(payloads(&body), messages);
    let largest = (100 << 10) + 4 + 5;
    let max = max_seen.load(Ordering::SeqCst);
    assert!(
        max > 64 << 10,
        "a message over the bound was seen held: {max}"
    );
    assert!(
        max <= largest,
        "the call held {max} bytes unwritten: more than its largest message ({largest})"
    );
}

/// A message over the bound before commit (the driver's inbox): accepted once nothing is held, and the
/// call completes with every message whole and in order (no hang on the pre-commit bound).
#[tokio::test(start_paused = true)]
async fn messages_over_the_bound_before_commit_do_not_hang() {
    let server = H2Server::tcp(
        small_window,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_ok() {
                s.ok(b"done");
            }
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), retry(3, &["UNAVAILABLE"]).service(SVC));
    let (mut tx, mut rx) = start_bidi(&ch).await;
    let messages: Vec<Vec<u8>> = (0..9u32)
        .map(|i| numbered(i, if i % 2 == 0 { 90 << 10 } else { 300 }))
        .collect();
    send_all(&mut tx, &messages).await;
    finish_then_done(tx, &mut rx).await;
    let (body, ends) = server.body_of_id(1);
    assert_eq!(ends, 1);
    assert_eq!(payloads(&body), messages);
}

/// The sizes of call `call`'s messages (deterministic, 0 to 3 KiB with a few of 20 KiB).
fn sizes(call: usize, n: usize) -> Vec<usize> {
    let mut x = call as u64 * 2_654_435_761 + 7;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 11 {
                0 => 0,
                1 => (16 << 10) + 1,
                _ => (x % 3000) as usize,
            }
        })
        .collect()
}

/// Where a call of [`race_server`] commits: after this many request bytes.
fn commit_after(path: &str) -> usize {
    let n: usize = path
        .rsplit('C')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    (n * 7919) % 150_000
}

/// The server of the race tests: an attempt numbered `prev` == `committing` sends its response headers
/// (the call commits) after [`commit_after`] bytes, then reads the rest and answers `done`; other attempts
/// read slowly (a retry's first attempt fails UNAVAILABLE after half that many bytes).
fn race_server(committing: u32) -> support::h2_server::Handler {
    handler(move |mut s: Stream| async move {
        let at = commit_after(&s.path);
        if s.prev() != committing {
            if committing > 0 && s.read_bytes(at / 2).await.is_ok() {
                // A retry: this attempt fails before headers.
                s.trailers_only("14", &[]);
                return;
            }
            // A hedge that never answers: read slowly until reset.
            loop {
                tokio::time::sleep(Duration::from_millis(2)).await;
                match s.recv.data().await {
                    Some(Ok(chunk)) => {
                        let _ = s.recv.flow_control().release_capacity(chunk.len());
                    }
                    _ => return,
                }
            }
        }
        if s.read_bytes(at).await.is_err() {
            return;
        }
        let Some(mut send) = s.headers() else { return };
        if s.read_to_end().await.is_ok() {
            let _ = send.send_data(grpc_message(b"done"), false);
            let _ = send.send_trailers(trailers("0", &[]));
        }
    })
}

/// Runs `CALLS` calls at once, each sending numbered messages from its own task (yielding now and then)
/// while the server commits it mid-stream, then finishing or dropping the sender; checks that the
/// committed stream got every message exactly once, in order, then one END_STREAM.
async fn race(config: String, committing: u32, window: fn(&mut h2::server::Builder)) {
    const CALLS: usize = 12;
    const MESSAGES: usize = 250;
    let server = H2Server::tcp(window, race_server(committing)).await;
    let ch = channel_with_config(&server.target(), config);
    let mut calls = Vec::new();
    for call in 0..CALLS {
        let ch = ch.clone();
        calls.push(tokio::spawn(async move {
            let (mut tx, mut rx) = ch
                .streaming_raw(&format!("/t.S/C{call}"), Request::new(()))
                .await
                .expect("start");
            let sending = tokio::spawn(async move {
                for (i, n) in sizes(call, MESSAGES).into_iter().enumerate() {
                    tx.send(Bytes::from(numbered(i as u32, n)))
                        .await
                        .expect("send");
                    if i % 7 == call % 7 {
                        tokio::task::yield_now().await;
                    }
                }
                if call % 2 == 0 {
                    tx.finish().await.expect("finish");
                } else {
                    drop(tx);
                }
            });
            let reply = rx.message().await.expect("reply");
            assert_eq!(reply.as_deref(), Some(&b"done"[..]), "call {call}");
            assert!(rx.message().await.expect("OK").is_none());
            sending.await.expect("sender");
        }));
    }
    for c in calls {
        no_hang("call", c).await.expect("call");
    }
    for call in 0..CALLS {
        let path = format!("/t.S/C{call}");
        let open = server
            .opens()
            .into_iter()
            .find(|o| {
                o.path == path
                    && o.previous_attempts().map_or(0, |p| p.parse().unwrap_or(0)) == committing
            })
            .expect("the committed attempt opened");
        let expected: Vec<Vec<u8>> = sizes(call, MESSAGES)
            .into_iter()
            .enumerate()
            .map(|(i, n)| numbered(i as u32, n))
            .collect();
        let got = payloads(&server.body(open.conn, open.id));
        let first_wrong = got.iter().zip(&expected).position(|(g, e)| g != e);
        assert!(
            got == expected,
            "call {call}: {} messages, {} expected; first difference at {first_wrong:?}",
            got.len(),
            expected.len()
        );
        assert_eq!(
            ends_of(&server, open.conn, open.id).0,
            1,
            "call {call}: one END_STREAM"
        );
    }
    assert_eq!(ch.stats().unsent_request_bytes, 0);
}

/// Sends racing a commit on a retried call (the first attempt fails mid-request, the retry commits
/// mid-request), small window, multi-threaded runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbered_messages_survive_a_retry_committing_mid_stream_on_two_threads() {
    race(
        retry(3, &["UNAVAILABLE"]).service(SVC).to_string(),
        1,
        small_window,
    )
    .await;
}

/// Sends racing a commit to the hedge (the original reads slowly and never answers), small window,
/// multi-threaded runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbered_messages_survive_a_commit_to_a_hedge_mid_stream_on_two_threads() {
    race(
        hedging(2, "0.02s").service(SVC).to_string(),
        1,
        small_window,
    )
    .await;
}

/// Sends racing a commit with no policy (the driver still runs until the response headers), default
/// windows, multi-threaded runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbered_messages_survive_a_plain_commit_mid_stream_on_two_threads() {
    race("{}".to_string(), 0, support::h2_server::defaults).await;
}

/// The bidi pump after commit with a backlog the writer holds (window 0): the application drops the
/// response (its receiving half) while the pump still has messages to feed: the stream is reset with
/// CANCEL and never half-closed, and the pump's task ends.
#[tokio::test(start_paused = true)]
async fn a_bidi_call_dropped_with_a_backlog_is_reset_not_half_closed() {
    let server = H2Server::tcp(
        closed_window,
        handler(|mut s: Stream| async move { hold_after_headers(&mut s).await }),
    )
    .await;
    let ch = channel_with_config(&server.target(), "{}");
    let (feed, response) = start_fed_bidi(&ch).await;
    for i in 0..200u32 {
        feed.send(numbered(i, 1000)).expect("feed");
    }
    settle(Duration::from_millis(100)).await;
    assert!(ch.stats().unsent_request_bytes > 0);
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    drop(response);
    settle(Duration::from_millis(100)).await;
    assert_eq!(ends_of(&server, 1, 1), (0, vec![Reason::CANCEL]));
    assert_eq!(
        metrics.num_alive_tasks(),
        before - 2,
        "the pump and the writer ended"
    );
    drop(feed);
    assert_eq!(ch.stats().unsent_request_bytes, 0);
}

/// The application's request stream ends while the bidi pump's send waits on the bound after commit: the
/// pump finishes the call only after the whole backlog, once (the server reads late).
#[tokio::test(start_paused = true)]
async fn the_bidi_pump_finishes_after_its_backlog_once() {
    let server = H2Server::tcp(
        small_window,
        reads_then_answers_with(HeadersAt::Start, Duration::from_secs(2), b""),
    )
    .await;
    let ch = channel_with_config(&server.target(), "{}");
    let (feed, response) = start_fed_bidi(&ch).await;
    let messages: Vec<Vec<u8>> = (0..150u32).map(|i| numbered(i, 1000)).collect();
    for m in &messages {
        feed.send(m.clone()).expect("feed");
    }
    drop(feed);
    let mut rx = response.into_message();
    let reply = guarded("reply", rx.message()).await.expect("reply");
    assert!(reply.is_some());
    assert!(guarded("end", rx.message()).await.expect("OK").is_none());
    let (body, ends) = server.body_of_id(1);
    // Vec<u8> messages are prost `bytes`: field 1, so compare the tails.
    let got = payloads(&body);
    assert_eq!(got.len(), messages.len());
    for (g, m) in got.iter().zip(&messages) {
        assert!(g.ends_with(m), "in order, whole");
    }
    assert_eq!(ends, 1);
}
