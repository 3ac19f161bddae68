//! Attacks on the committed call's writer task and the batched send paths (review of 992b14f), against the
//! scriptable h2 server on tokio's paused clock: back-pressure with a large message behind a partly written
//! one, a half-close (`finish`) followed by the server's early end, a sender dropped mid-write, an abort
//! while the writer holds data, a receiving half dropped while the writer waits, a deadline while the
//! sender waits for room, empty and 16 KiB messages, retries and hedging over batches.

mod support;

use std::future::poll_fn;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Request, RequestSender, Streaming};
use h2::Reason;
use support::channel_with_config;
use support::frames::{grpc_message, payloads};
use support::guards::{eventually_every, guarded, settle, SETTLE_STEP};
use support::h2_server::{handler, trailers, H2Server, Stream};

/// The server's stream window in these tests.
const WINDOW: usize = 1000;

fn small_window(b: &mut h2::server::Builder) {
    b.initial_window_size(WINDOW as u32);
}

async fn start(ch: &Channel) -> (RequestSender<Bytes>, Streaming<Bytes>) {
    guarded("start", ch.streaming_raw("/t.S/Bidi", Request::new(())))
        .await
        .expect("start")
}

/// A server with a 1000-byte stream window that answers headers at once (the call commits), reads nothing
/// for 5 s, then reads the whole request and answers `done`, OK.
async fn slow_reader() -> H2Server {
    H2Server::tcp(
        small_window,
        handler(|mut s: Stream| async move {
            let Some(mut send) = s.headers() else {
                return;
            };
            tokio::time::sleep(Duration::from_secs(5)).await;
            if s.read_to_end().await.is_ok() {
                let _ = send.send_data(grpc_message(b"done"), false);
                let _ = send.send_trailers(trailers("0", &[]));
            }
        }),
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

// FAILS: livelock. After commit, a send of a message over 32 KiB while a smaller remainder (here 1000
// bytes of a partly written message) waits for flow control is refused room (queued + new > 64 KiB, not
// caught up); the sender wakes the writer task, which finds flow control still closed and, seeing at most
// 32 KiB queued, wakes the sender right back: the two tasks wake each other forever (a core at 100 %
// until the window opens; on tokio's paused clock time never advances, so the window never opens).
#[test]
fn a_large_send_behind_a_partly_written_message_waits_without_spinning() {
    within_real_time(20, "large send behind a partial write", || {
        Box::pin(async {
            let server = slow_reader().await;
            let ch = channel_with_config(&server.target(), "{}");
            let (mut tx, mut rx) = start(&ch).await;
            guarded("headers", rx.headers()).await.expect("committed");
            let a = vec![b'a'; 2 * WINDOW - 5];
            guarded("A", tx.send(Bytes::from(a.clone())))
                .await
                .expect("A queued");
            // Let the writer write A's first 1000 bytes (the window): 1000 bytes of it stay queued.
            settle(Duration::from_millis(100)).await;
            let b = vec![b'b'; 64 << 10];
            guarded("B", tx.send(Bytes::from(b.clone())))
                .await
                .expect("B queued once A is out");
            guarded("finish", tx.finish()).await.expect("finish");
            let reply = guarded("reply", rx.message()).await.expect("reply");
            assert_eq!(reply.as_deref(), Some(&b"done"[..]));
            let (body, ends) = server.body_of_id(1);
            assert_eq!(ends, 1);
            assert_eq!(payloads(&body), vec![a, b]);
        })
    });
}

// FAILS: `finish` now marks the call half-closed before END_STREAM reaches h2. When the server then ends
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
    let (mut tx, mut rx) = start(&ch).await;
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

/// Keeps `poll_fn` in use for tests added below.
#[allow(dead_code)]
async fn noop() {
    poll_fn(|_| std::task::Poll::Ready(())).await;
    let _ = Code::Ok;
    eventually_every(SETTLE_STEP, "noop", || true).await;
}

/// The control for the livelock above: the same, with B small enough (30 KiB) that it fits beside A's
/// remainder, completes at once.
#[test]
fn a_send_that_fits_behind_a_partly_written_message_completes() {
    within_real_time(20, "small send behind a partial write", || {
        Box::pin(async {
            let server = slow_reader().await;
            let ch = channel_with_config(&server.target(), "{}");
            let (mut tx, mut rx) = start(&ch).await;
            guarded("headers", rx.headers()).await.expect("committed");
            let a = vec![b'a'; 2 * WINDOW - 5];
            guarded("A", tx.send(Bytes::from(a.clone())))
                .await
                .expect("A queued");
            settle(Duration::from_millis(100)).await;
            let b = vec![b'b'; 30 << 10];
            guarded("B", tx.send(Bytes::from(b.clone())))
                .await
                .expect("B queued");
            guarded("finish", tx.finish()).await.expect("finish");
            let reply = guarded("reply", rx.message()).await.expect("reply");
            assert_eq!(reply.as_deref(), Some(&b"done"[..]));
            let (body, ends) = server.body_of_id(1);
            assert_eq!(ends, 1);
            assert_eq!(payloads(&body), vec![a, b]);
        })
    });
}
