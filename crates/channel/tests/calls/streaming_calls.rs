//! The halves of a streaming call at their edges, against the scriptable h2 server over real sockets on
//! tokio's paused clock: an early Trailers-Only (answered with RST_STREAM(NO_ERROR), releasing a blocked
//! sender, failing a later `send` with a code that is not OK), half-close with no message or by dropping
//! the sender, and `client_streaming` while the application's request stream has nothing to give (its
//! deadline, an early failure, and the application dropping it: reset, never half-closed). And a whole
//! early OK answer (the server answers without reading the request, h2 resets the request stream with
//! NO_ERROR) while the bidi pump or `client_streaming` still has messages behind flow control: the
//! application gets the server's answer, whether the pump's send then fails or its request stream ends.

use grpc_test_support as support;

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Code, Request};
use h2::Reason;
use interop::faulty::{FlakyMessage, FlakyTotals};
use support::config::retry;
use support::frames::numbered;
use support::guards::{eventually_every, guarded, settle, GUARD, NO_HANG, SETTLE_STEP};
use support::h2_server::{
    answers_without_reading, defaults, handler, small_window, Event, H2Server, Stream, SVC,
};
use support::shapes::{msg, start_fed_bidi};
use support::{channel_with_config, IterStream};
use tokio::time::Instant;

/// PROTOCOL-HTTP2: a client that gets the server's END_STREAM before sending its own sends
/// RST_STREAM(NO_ERROR), also before commit, while the attempt still owns the stream. The failure this guards
/// against: on Trailers-Only the attempt dropped every handle, and h2's implicit reset of a client stream is
/// CANCEL.
#[tokio::test(start_paused = true)]
async fn early_trailers_only_is_answered_with_rst_no_error() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            s.trailers_only("3", &[]);
            let _ = s.read_to_end().await;
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), "{}");
    let outcome = tokio::time::timeout(GUARD, async {
        let (_tx, mut rx) = ch
            .streaming_raw("/t.S/Bidi", Request::new(()))
            .await
            .expect("start");
        let status = rx.message().await.expect_err("INVALID_ARGUMENT");
        assert_eq!(status.code(), Code::InvalidArgument);
        eventually_every(
            SETTLE_STEP,
            "the server sees the client's RST_STREAM",
            || !server.resets().is_empty(),
        )
        .await;
        // The sender is still alive: the client never half-closed.
        drop(_tx);
    })
    .await;
    assert!(outcome.is_ok());
    assert_eq!(
        server
            .resets()
            .iter()
            .map(|r| (r.id, r.reason))
            .collect::<Vec<_>>(),
        vec![(1, Reason::NO_ERROR)],
        "trailers before the client's END_STREAM: RST_STREAM(NO_ERROR)"
    );
}

/// A streaming call whose server answers Trailers-Only OK before commit: the call is OK, and a later `send`
/// fails with a code that is not OK (an `Err(Status)` whose code is OK is not an error a caller can act on).
/// The failure this guards against: `send` returned the call's own OK status as its error (after commit the
/// same situation gave INTERNAL "the call has ended").
#[tokio::test(start_paused = true)]
async fn send_after_an_ok_trailers_only_fails_with_a_non_ok_code() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            s.trailers_only("0", &[]);
            let _ = s.read_to_end().await;
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), "{}");
    let outcome = tokio::time::timeout(GUARD, async {
        let (mut tx, mut rx) = ch
            .streaming_raw("/t.S/Bidi", Request::new(()))
            .await
            .expect("start");
        assert!(rx.message().await.expect("OK").is_none());
        tx.send(Bytes::from_static(b"late")).await
    })
    .await
    .expect("guard");
    let err = outcome.expect_err("the call is over");
    assert_ne!(
        err.code(),
        Code::Ok,
        "send failed with an OK status: {err:?}"
    );
}

/// Half-close with no message at all, and dropping the sender instead of finishing, both reach the
/// committed stream as one END_STREAM with an empty body.
#[tokio::test(start_paused = true)]
async fn a_half_close_without_messages_or_a_dropped_sender_ends_the_request_once() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_ok() {
                s.ok(b"");
            }
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), retry(3, &["UNAVAILABLE"]).service(SVC));
    let outcome = tokio::time::timeout(GUARD, async {
        for finish in [true, false] {
            let (tx, mut rx) = ch
                .streaming_raw("/t.S/Bidi", Request::new(()))
                .await
                .expect("start");
            if finish {
                tx.finish().await.expect("finish");
            } else {
                drop(tx);
            }
            assert!(rx.message().await.expect("reply").is_some());
            assert!(rx.message().await.expect("OK").is_none());
        }
    })
    .await;
    assert!(outcome.is_ok());
    for id in [1, 3] {
        assert_eq!(server.body_of_id(id), (Vec::new(), 1), "stream {id}");
    }
}

/// Trailers-Only from the server while the request is still being written, before commit: the driver
/// notices, the blocked sender is released, the status is the server's, RST_STREAM(NO_ERROR) is sent.
#[tokio::test(start_paused = true)]
async fn trailers_only_before_commit_releases_a_blocked_sender() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            if s.read_bytes(5 + 8192).await.is_err() {
                return;
            }
            s.trailers_only("3", &[("grpc-message", "stop")]);
            let respond = &mut s.respond;
            let _ = poll_fn(|cx| respond.poll_reset(cx)).await;
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }),
    )
    .await;
    let ch = channel_with_config(
        &server.target(),
        retry(3, &["UNAVAILABLE"]).service(SVC).max_backoff("10s"),
    );
    let (mut tx, mut rx) = guarded("start", ch.streaming_raw("/t.S/Upload", Request::new(())))
        .await
        .expect("start");
    let sending = tokio::time::timeout(Duration::from_secs(60), async move {
        for _ in 0..100 {
            if tx.send(Bytes::from(vec![1u8; 8192])).await.is_err() {
                return;
            }
        }
        let _ = tx.finish().await;
    })
    .await;
    assert!(sending.is_ok(), "send stayed blocked");
    let status = guarded("status", rx.message())
        .await
        .expect_err("INVALID_ARGUMENT");
    assert_eq!(status.code(), Code::InvalidArgument);
}

/// Yields `items`, then stays pending forever (like a channel receiver whose sender is still alive).
struct ThenPending(Vec<FlakyMessage>);

impl futures_core::Stream for ThenPending {
    type Item = FlakyMessage;
    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<FlakyMessage>> {
        if self.0.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(Some(self.0.remove(0)))
        }
    }
}

/// `Channel::client_streaming` with a timeout ends at its deadline while the application's request stream
/// has no next item. The failure this guards against: it awaited the next request item with nothing racing
/// it, and enforced the deadline only once the request stream ended.
#[tokio::test(start_paused = true)]
async fn client_streaming_ends_at_its_deadline_while_the_request_stream_waits() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            let _ = s.read_to_end().await;
        }),
    )
    .await;
    let ch = channel_with_config(
        &server.target(),
        retry(3, &["UNAVAILABLE"]).service(SVC).max_backoff("10s"),
    );
    let start = Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(60),
        ch.client_streaming::<FlakyMessage, FlakyTotals, _>(
            "/t.S/ClientStream",
            Request::new(ThenPending(vec![msg(10)])).with_timeout(Duration::from_secs(1)),
        ),
    )
    .await;
    match result {
        Ok(Err(status)) => {
            assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
            assert!(start.elapsed() < Duration::from_millis(1100));
        }
        Ok(Ok(_)) => panic!("a silent server answered"),
        Err(_) => panic!(
            "client_streaming with a 1 s timeout was still running after 60 s: the deadline is not enforced while \
             the request stream waits"
        ),
    }
}

/// The server fails the call early (Trailers-Only INVALID_ARGUMENT after the first message) while the
/// application's request stream has nothing more yet: `client_streaming` returns the server's status (the
/// failure this guards against is the same: it waited for the next request item first).
#[tokio::test(start_paused = true)]
async fn client_streaming_returns_an_early_server_failure_while_the_request_stream_waits() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            if s.read_bytes(5 + 12).await.is_ok() {
                s.trailers_only("3", &[("grpc-message", "bad first message")]);
            }
        }),
    )
    .await;
    let ch = channel_with_config(
        &server.target(),
        retry(3, &["UNAVAILABLE"]).service(SVC).max_backoff("10s"),
    );
    let result = tokio::time::timeout(
        Duration::from_secs(60),
        ch.client_streaming::<FlakyMessage, FlakyTotals, _>(
            "/t.S/ClientStream",
            Request::new(ThenPending(vec![msg(10)])),
        ),
    )
    .await;
    match result {
        Ok(Err(status)) => assert_eq!(status.code(), Code::InvalidArgument, "{status:?}"),
        Ok(Ok(_)) => panic!("the server failed the call"),
        Err(_) => panic!(
            "client_streaming did not return the server's INVALID_ARGUMENT within 60 s: it waits for the next \
             request item first"
        ),
    }
}

/// A call the application gives up is cancelled, never half-closed: 100 `client_streaming` calls on a
/// multi-threaded runtime, each committed (the server answers response headers at once) with its first
/// message read by the server, are dropped while the application's request stream has nothing more to
/// give. The server records how each stream ended: RST_STREAM for every one, END_STREAM for none (a server
/// that reads to the end would run a request the application never finished).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_client_streaming_calls_are_reset_and_never_half_closed() {
    const CALLS: usize = 100;
    let (first_read, mut first_reads) = tokio::sync::mpsc::unbounded_channel::<()>();
    let server = H2Server::tcp(
        defaults,
        handler(move |mut s: Stream| {
            let first_read = first_read.clone();
            async move {
                if s.path == "/t.S/Ping" {
                    if s.read_to_end().await.is_ok() {
                        s.ok(b"pong");
                    }
                    return;
                }
                let Some(_response) = s.headers() else { return };
                if s.read_bytes(1).await.is_err() {
                    return;
                }
                let _ = first_read.send(());
                // Logs END_STREAM or the reset, whichever comes first.
                let _ = s.read_to_end().await;
            }
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), "{}");
    for i in 0..CALLS {
        let call = ch.client_streaming::<FlakyMessage, FlakyTotals, _>(
            "/t.S/ClientStream",
            Request::new(ThenPending(vec![msg(10)])),
        );
        let mut call = Box::pin(call);
        tokio::select! {
            outcome = &mut call => panic!("call {i} ended: {outcome:?}"),
            read = first_reads.recv() => read.expect("the server reads"),
        }
        // A round trip behind the server's response headers on the same connection: by its end the call
        // has had its headers (and committed).
        let pong = tokio::time::timeout(
            NO_HANG,
            ch.unary_raw("/t.S/Ping", Request::new(Bytes::new())),
        )
        .await
        .expect("no hang")
        .expect("pong");
        assert_eq!(&pong.into_message()[..], b"pong");
        drop(call);
    }
    // How the client-streaming streams ended (the pings end with END_STREAM, as they should).
    let ended = |server: &H2Server| {
        let calls: std::collections::BTreeSet<(usize, u32)> = server
            .opens()
            .iter()
            .filter(|o| o.path == "/t.S/ClientStream")
            .map(|o| (o.conn, o.id))
            .collect();
        let mut half_closed = std::collections::BTreeSet::new();
        let mut reset = std::collections::BTreeSet::new();
        for e in server.events() {
            match e {
                Event::End { conn, id } if calls.contains(&(conn, id)) => {
                    half_closed.insert(id);
                }
                Event::Reset(r) if calls.contains(&(r.conn, r.id)) => {
                    reset.insert(r.id);
                }
                _ => {}
            }
        }
        (half_closed, reset)
    };
    // Every call's end reaches the server (a bounded wait, not a timing assertion).
    let mut outcome = ended(&server);
    for _ in 0..400 {
        if outcome.0.len() + outcome.1.len() >= CALLS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        outcome = ended(&server);
    }
    let (half_closed, reset) = outcome;
    assert!(
        half_closed.is_empty(),
        "{} of {CALLS} dropped calls sent END_STREAM (before any reset): a request the application never \
         finished looks complete; streams {half_closed:?}",
        half_closed.len()
    );
    assert_eq!(reset.len(), CALLS, "every dropped call is reset");
}

/// A server that answers a whole early OK response ([`answers_without_reading`], after 500 ms, with a
/// 1000-byte window) and a bidi pump call to it fed `messages` numbered 1000-byte messages, 1 s later:
/// the server, the channel, the feed (still open) and the response.
async fn bidi_behind_an_early_ok_response(
    messages: u32,
) -> (
    H2Server,
    grpc_channel::Channel,
    tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    grpc_channel::Response<grpc_channel::Streaming<Vec<u8>>>,
) {
    let server = H2Server::tcp(
        small_window,
        answers_without_reading(Duration::from_millis(500), b""),
    )
    .await;
    let ch = channel_with_config(&server.target(), "{}");
    let (feed, response) = start_fed_bidi(&ch).await;
    for i in 0..messages {
        feed.send(numbered(i, 1000)).expect("feed");
    }
    settle(Duration::from_secs(1)).await;
    (server, ch, feed, response)
}

// Failed before the fix (and before the send bound of the whole call): the second `message()` was
// Err(UNAVAILABLE "the stream was closed"): the pump's send failed on the closed stream and `abort` made that
// the call's status.
/// The server answers the whole response (a message, then OK) without reading the request, as a gRPC
/// server may, while the bidi pump still has messages queued behind flow control; h2 then resets the
/// request stream with NO_ERROR (RFC 9113 §8.1). The application, reading the response a little later,
/// must get the server's message and OK: the pump's failed send must not replace the server's status.
#[tokio::test(start_paused = true)]
async fn an_early_ok_response_is_not_replaced_by_the_bidi_pumps_failed_send() {
    let (_server, _ch, _feed, response) = bidi_behind_an_early_ok_response(200).await;
    let mut rx = response.into_message();
    let reply = guarded("reply", rx.message()).await;
    assert!(
        matches!(reply, Ok(Some(_))),
        "the server answered a message and OK; the application got {reply:?}"
    );
    let end = guarded("end", rx.message()).await;
    assert!(matches!(end, Ok(None)), "{end:?}");
}

/// The same early whole answer on `client_streaming` (the request stream has 200 messages, most of them
/// still behind flow control when the server answers): the call returns the server's message.
#[tokio::test(start_paused = true)]
async fn an_early_ok_response_is_what_client_streaming_returns() {
    let server = H2Server::tcp(
        small_window,
        answers_without_reading(Duration::from_millis(500), b""),
    )
    .await;
    let ch = channel_with_config(&server.target(), "{}");
    let messages: Vec<Vec<u8>> = (0..200u32).map(|i| numbered(i, 1000)).collect();
    let result = guarded(
        "call",
        ch.client_streaming::<Vec<u8>, Vec<u8>, _>(
            "/t.S/ClientStream",
            Request::new(IterStream(messages.into_iter())),
        ),
    )
    .await;
    assert!(result.is_ok(), "the server answered OK: {result:?}");
}

// Failed before the fix (a regression of the pumps' cancel_on_drop): "the server answered OK; the application
// got Err(Status { code: Cancelled, message: \"call cancelled by the client\" })": `finish` failed (the
// writer's write had failed) and the sender's `cancel_on_drop` drop set CANCELLED as the call's status.
/// The server answers the whole response (a message, then OK) without reading the request, then h2
/// resets the request stream with NO_ERROR, while the bidi pump's writer holds 40 messages behind flow
/// control and the pump itself waits for the application's next message. The application's request
/// stream then ends (the pump finishes the call) and only then does the application read the response:
/// the server's message and OK, not a CANCELLED the pump's drop made up.
#[tokio::test(start_paused = true)]
async fn a_bidi_pump_finishing_after_an_early_ok_response_does_not_cancel_it() {
    let (_server, _ch, feed, response) = bidi_behind_an_early_ok_response(40).await;
    drop(feed);
    settle(Duration::from_millis(100)).await;
    let mut rx = response.into_message();
    let reply = guarded("reply", rx.message()).await;
    assert!(matches!(reply, Ok(Some(_))), "{reply:?}");
    let end = guarded("end", rx.message()).await;
    assert!(
        matches!(end, Ok(None)),
        "the server answered OK; the application got {end:?}"
    );
}
