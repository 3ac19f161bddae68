//! gRFC A6 for the streaming call shapes: client streaming, server streaming and bidi calls under a retry
//! policy, against the faulty server's `Flaky*` methods and the scriptable h2 server over real sockets, on
//! tokio's paused clock. What is replayed (every buffered message, on every attempt), what commits a call
//! (response headers; a request stream that outgrows the replay buffer), deadlines across attempts, how
//! much a call buffers while no attempt can take its messages and what it frees at commit, and many
//! concurrent calls. (Hedged server streams: hedging.rs; the throttle shared across methods:
//! throttling.rs; a `unix:` target: unix_targets.rs.)

use grpc_test_support as support;

use std::time::Duration;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Request, Response, Status};
use interop::faulty::{methods, AttemptOutcome, FlakyItem, FlakyMessage, FlakyTotals};
use support::config::{retry, retry_config};
use support::flaky::{attempts, channel_with, ended, failed, flaky_request, messages};
use support::frames::{deframe, grpc_message};
use support::guards::{eventually, guarded, settle, watchdog, GUARD};
use support::h2_server::{defaults, handler, trailers, Event, H2Server, Stream, SVC};
use support::shapes::{call_shape, msg, Shape};
use support::{channel_with_config, with_metadata, IterStream};
use tokio::time::Instant;

/// A guarded client-streaming call to `FlakyClientStream` sending `msgs`, keyed `key`, whose first
/// `fail_times` attempts fail UNAVAILABLE.
async fn client_stream(
    ch: &Channel,
    msgs: Vec<FlakyMessage>,
    key: &str,
    fail_times: &str,
) -> Result<Response<FlakyTotals>, Status> {
    guarded(
        "client streaming",
        ch.client_streaming::<FlakyMessage, FlakyTotals, _>(
            methods::FLAKY_CLIENT_STREAM,
            flaky_request(
                Request::new(IterStream(msgs.into_iter())),
                key,
                &[("x-fail-times", fail_times)],
            ),
        ),
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn client_streaming_retries_replay_every_message_on_every_attempt() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(4, &["UNAVAILABLE"])),
        |b| b,
    );
    let (msgs, bytes) = messages(&[100, 0, 300, 1000]);
    let resp = client_stream(&ch, msgs, "cs", "2")
        .await
        .expect("the third attempt succeeds");
    assert_eq!(
        *resp.message(),
        FlakyTotals {
            messages: 4,
            bytes,
            attempt: 3
        },
        "the answering attempt got the whole request stream"
    );
    assert_eq!(
        attempts(&[&server], "cs"),
        vec![(1, None), (2, Some("1".into())), (3, Some("2".into()))]
    );
    let seen: Vec<(u32, u64, AttemptOutcome)> = ended(&server, "cs")
        .into_iter()
        .map(|e| (e.messages, e.bytes, e.outcome))
        .collect();
    assert_eq!(
        seen,
        vec![
            (4, bytes, failed("14")),
            (4, bytes, failed("14")),
            (4, bytes, AttemptOutcome::Ok)
        ],
        "every attempt received every message"
    );
}

#[tokio::test(start_paused = true)]
async fn client_streaming_within_the_per_rpc_buffer_limit_is_retried() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b.per_rpc_buffer_limit(1024),
    );
    // 4 × (200 + 3) bytes of messages, 4 × 5 bytes of prefixes: under 1 KiB either way.
    let (msgs, _) = messages(&[200, 200, 200, 200]);
    let resp = client_stream(&ch, msgs, "small", "1")
        .await
        .expect("retried");
    assert_eq!(resp.message().messages, 4);
    assert_eq!(attempts(&[&server], "small").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn client_streaming_past_the_per_rpc_buffer_limit_commits_and_is_not_retried() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b.per_rpc_buffer_limit(1024),
    );
    let (msgs, bytes) = messages(&[600, 600, 600, 600]);
    // Only the first attempt fails: a retry would succeed, so an OK here would mean the call was retried.
    let status = client_stream(&ch, msgs, "big", "1")
        .await
        .expect_err("committed: the failure is final");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(attempts(&[&server], "big"), vec![(1, None)]);
    let first = &ended(&server, "big")[0];
    assert_eq!(
        (first.messages, first.bytes),
        (4, bytes),
        "a call that outgrew the buffer is still sent whole"
    );
}

#[tokio::test(start_paused = true)]
async fn client_streaming_past_the_channel_retry_buffer_commits_and_is_not_retried() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b.retry_buffer_size(1024),
    );
    let (msgs, _) = messages(&[600, 600, 600, 600]);
    let status = client_stream(&ch, msgs, "pool", "1")
        .await
        .expect_err("committed: the failure is final");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(attempts(&[&server], "pool"), vec![(1, None)]);
}

#[tokio::test(start_paused = true)]
async fn bidi_failure_before_the_first_response_is_retried_and_replays_the_buffered_messages() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b,
    );
    let (mut tx, mut rx) = guarded(
        "start",
        ch.streaming_raw(
            methods::FLAKY_BIDI,
            flaky_request(Request::new(()), "bidi", &[("x-fail-times", "1")]),
        ),
    )
    .await
    .expect("the call starts");
    // Attempt 1 reads one message and fails Trailers-Only; the application never notices.
    guarded("send", tx.send(Bytes::from_static(b"one")))
        .await
        .expect("buffered");
    guarded("send", tx.send(Bytes::from_static(b"two")))
        .await
        .expect("buffered");
    let echo = guarded("echo", rx.message()).await.expect("echo");
    assert_eq!(echo.as_deref(), Some(&b"one"[..]));
    let echo = guarded("echo", rx.message()).await.expect("echo");
    assert_eq!(echo.as_deref(), Some(&b"two"[..]));
    // Committed to attempt 2 now: a new message goes straight to it.
    guarded("send", tx.send(Bytes::from_static(b"three")))
        .await
        .expect("sent");
    let echo = guarded("echo", rx.message()).await.expect("echo");
    assert_eq!(echo.as_deref(), Some(&b"three"[..]));
    guarded("finish", tx.finish()).await.expect("half-close");
    let end = guarded("end", rx.message()).await.expect("OK");
    assert_eq!(end, None);
    assert_eq!(
        rx.trailers().and_then(|t| t.get("x-attempt")),
        Some("2"),
        "the answer came from the retry"
    );
    assert_eq!(
        attempts(&[&server], "bidi"),
        vec![(1, None), (2, Some("1".into()))]
    );
    let seen: Vec<(u32, AttemptOutcome)> = ended(&server, "bidi")
        .into_iter()
        .map(|e| (e.messages, e.outcome))
        .collect();
    assert_eq!(
        seen,
        vec![(1, failed("14")), (3, AttemptOutcome::Ok)],
        "the retry got the two buffered messages replayed, then the third"
    );
}

#[tokio::test(start_paused = true)]
async fn bidi_failure_after_a_response_is_not_retried() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b,
    );
    let (mut tx, mut rx) = guarded(
        "start",
        ch.streaming_raw(
            methods::FLAKY_BIDI,
            flaky_request(
                Request::new(()),
                "late",
                &[
                    ("x-fail-times", "1"),
                    ("x-fail-after-first-response", "true"),
                ],
            ),
        ),
    )
    .await
    .expect("the call starts");
    guarded("send", tx.send(Bytes::from_static(b"one")))
        .await
        .expect("sent");
    let echo = guarded("echo", rx.message()).await.expect("echo");
    assert_eq!(echo.as_deref(), Some(&b"one"[..]));
    let status = guarded("end", rx.message())
        .await
        .expect_err("response headers committed the call: the failure is final");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    // Nothing retries in the background either.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(attempts(&[&server], "late"), vec![(1, None)]);
}

#[tokio::test(start_paused = true)]
async fn server_streaming_is_retried_after_a_trailers_only_failure() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b,
    );
    let resp = guarded(
        "server streaming",
        ch.server_streaming::<FlakyMessage, FlakyItem>(
            methods::FLAKY_SERVER_STREAM,
            flaky_request(
                Request::new(FlakyMessage::default()),
                "ss",
                &[("x-fail-times", "1"), ("x-response-count", "3")],
            ),
        ),
    )
    .await
    .expect("the retry answers");
    let mut stream = resp.into_message();
    let mut items = Vec::new();
    while let Some(item) = guarded("item", stream.message()).await.expect("item") {
        items.push(item);
    }
    let want: Vec<FlakyItem> = (0..3)
        .map(|index| FlakyItem {
            index,
            client_attempt: 2,
            attempt: 2,
        })
        .collect();
    assert_eq!(items, want);
    assert_eq!(
        attempts(&[&server], "ss"),
        vec![(1, None), (2, Some("1".into()))]
    );
    assert_eq!(
        ended(&server, "ss")[1].messages,
        1,
        "the request was replayed"
    );
}

#[tokio::test(start_paused = true)]
async fn client_streaming_deadline_spans_every_attempt() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(5, &["UNAVAILABLE"])),
        |b| b,
    );
    let (msgs, _) = messages(&[10, 10]);
    let request = flaky_request(
        Request::new(IterStream(msgs.into_iter())),
        "deadline",
        &[("x-fail-times", "1"), ("x-hang-attempts", "2")],
    )
    .with_timeout(Duration::from_secs(1));
    let start = Instant::now();
    let status = guarded(
        "client streaming",
        ch.client_streaming::<FlakyMessage, FlakyTotals, _>(methods::FLAKY_CLIENT_STREAM, request),
    )
    .await
    .expect_err("deadline");
    let elapsed = start.elapsed();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_millis(1050),
        "{elapsed:?}"
    );
    assert_eq!(attempts(&[&server], "deadline").len(), 2);
    eventually("the hanging retry is cancelled at the deadline", || {
        ended(&server, "deadline")
            .iter()
            .any(|e| e.number == 2 && e.outcome == AttemptOutcome::Reset(h2::Reason::CANCEL))
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn bidi_deadline_spans_every_attempt() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(5, &["UNAVAILABLE"])),
        |b| b,
    );
    let request = flaky_request(
        Request::new(()),
        "deadline",
        &[("x-fail-times", "1"), ("x-hang-attempts", "2")],
    )
    .with_timeout(Duration::from_secs(1));
    let start = Instant::now();
    let (mut tx, mut rx) = guarded("start", ch.streaming_raw(methods::FLAKY_BIDI, request))
        .await
        .expect("the call starts");
    guarded("send", tx.send(Bytes::from_static(b"one")))
        .await
        .expect("buffered");
    let status = guarded("message", rx.message())
        .await
        .expect_err("deadline");
    let elapsed = start.elapsed();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_millis(1050),
        "{elapsed:?}"
    );
    assert_eq!(attempts(&[&server], "deadline").len(), 2);
}

// ---- Against the scriptable h2 server ------------------------------------------------------------------

/// Server-streaming: response headers and then UNAVAILABLE before any message is committed (headers
/// commit) and not retried.
#[tokio::test(start_paused = true)]
async fn server_streaming_headers_then_failure_is_not_retried() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            let _ = s.read_to_end().await;
            if let Some(mut send) = s.headers() {
                let _ = send.send_trailers(trailers("14", &[]));
            }
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), retry(5, &["UNAVAILABLE"]).service(SVC));
    let outcome = tokio::time::timeout(GUARD, async {
        let response = ch
            .server_streaming::<interop_proto::Empty, interop_proto::Empty>(
                "/t.S/Bidi",
                Request::new(interop_proto::Empty {}),
            )
            .await
            .expect("headers arrive");
        let mut stream = response.into_message();
        let status = stream
            .message()
            .await
            .expect_err("UNAVAILABLE after headers");
        assert_eq!(status.code(), Code::Unavailable);
        settle(Duration::from_secs(2)).await;
        assert_eq!(
            server.opens().len(),
            1,
            "server-streaming: headers commit, no retry"
        );
        let status = ch
            .unary_raw("/t.S/Unary", Request::new(Bytes::from_static(b"x")))
            .await
            .expect_err("UNAVAILABLE after headers");
        assert_eq!(status.code(), Code::Unavailable);
        settle(Duration::from_secs(2)).await;
        assert_eq!(server.opens().len(), 2, "unary: headers commit, no retry");
    })
    .await;
    assert!(outcome.is_ok());
}

/// `client_streaming` with a finite stream under retries: an early Trailers-Only UNAVAILABLE (after the first
/// message, before the client finished) is retried with every message replayed; an early non-retryable code
/// ends the call with that code, without a hang.
#[tokio::test(start_paused = true)]
async fn client_streaming_early_failure_is_retried_or_returned() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            let code = s.header("x-code").unwrap_or_else(|| "14".into());
            if s.prev() == 0 {
                if s.read_bytes(5 + 12).await.is_ok() {
                    s.trailers_only(&code, &[]);
                }
                return;
            }
            if s.read_to_end().await.is_ok() {
                let totals = FlakyTotals {
                    messages: 0,
                    bytes: 0,
                    attempt: s.prev() + 1,
                };
                s.ok(&prost::Message::encode_to_vec(&totals));
            }
        }),
    )
    .await;
    let ch = channel_with_config(
        &server.target(),
        retry(3, &["UNAVAILABLE"]).service(SVC).max_backoff("10s"),
    );
    let items: Vec<FlakyMessage> = (0..50).map(|_| msg(10)).collect();
    let r = guarded(
        "retried",
        ch.client_streaming::<FlakyMessage, FlakyTotals, _>(
            "/t.S/ClientStream",
            Request::new(IterStream(items.clone().into_iter())),
        ),
    )
    .await
    .expect("retried");
    assert_eq!(r.message().attempt, 2);
    let opens = server.opens();
    let (conn, id) = (opens[1].conn, opens[1].id);
    assert_eq!(
        deframe(&server.body(conn, id)).len(),
        50,
        "every message replayed"
    );
    let status = guarded(
        "fatal",
        ch.client_streaming::<FlakyMessage, FlakyTotals, _>(
            "/t.S/ClientStream",
            with_metadata(
                Request::new(IterStream(items.into_iter())),
                &[("x-code", "3")],
            ),
        ),
    )
    .await
    .expect_err("INVALID_ARGUMENT");
    assert_eq!(status.code(), Code::InvalidArgument);
}

/// While a retry backs off there is no attempt to write to, and `send` still waits once the per-call buffer
/// limit is reached: with a 64 KiB limit at most 1 MiB gets in during a 60 s pushback with nothing reading.
/// `RequestSender::send` promises that a slow server slows the sender instead of filling memory, and the
/// retry buffer limits exist to bound memory. The failure this guards against: past the limit the call
/// switched to "commit on start" and kept every further message in memory, so `send` never waited (the same
/// hole existed while a committed attempt was still picking, e.g. a wait-for-ready retry with no backend).
#[tokio::test(start_paused = true)]
async fn messages_sent_during_backoff_are_not_buffered_without_bound() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            if s.previous_attempts().is_none() {
                // The first attempt fails at once, pushing the retry 60 s away.
                s.trailers_only("14", &[("grpc-retry-pushback-ms", "60000")]);
                return;
            }
            if s.read_to_end().await.is_ok() {
                s.ok(b"");
            }
        }),
    )
    .await;
    let ch = Channel::builder(server.target())
        .default_service_config(retry(3, &["UNAVAILABLE"]).service(SVC))
        .service_config_lookup(false)
        .per_rpc_buffer_limit(64 << 10)
        .build()
        .expect("channel");
    let sent = Arc::new(AtomicUsize::new(0));
    let guard = tokio::time::timeout(GUARD, async {
        let (mut tx, _rx) = ch
            .streaming_raw("/t.S/Bidi", Request::new(()))
            .await
            .expect("start");
        // Let the first attempt fail: the call is now backing off for 60 s.
        settle(Duration::from_millis(200)).await;
        let counter = sent.clone();
        let sender = tokio::spawn(async move {
            for _ in 0..256 {
                if tx.send(Bytes::from(vec![7u8; 64 << 10])).await.is_err() {
                    break;
                }
                counter.fetch_add(1, Ordering::SeqCst);
            }
            tx
        });
        // 10 s into the 60 s backoff: nothing can have been written anywhere.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let accepted = sent.load(Ordering::SeqCst) * (64 << 10);
        sender.abort();
        accepted
    })
    .await;
    let accepted = guard.expect("guard");
    assert!(
        accepted <= 1 << 20,
        "send accepted {accepted} bytes during a backoff with a 64 KiB per-call buffer limit: memory grows without bound"
    );
}

/// A6: "On commit, ... free the buffer". A long-lived bidi call commits while its 250 KiB message is still
/// partly behind flow control; from then on it holds no retry buffer, so an unrelated unary call with a 100 KiB
/// request still fits the 300 KiB channel pool and is retried. The failure this guards against: at commit the
/// state machine freed only the messages the committed attempt had reported as sent; the rest stayed counted
/// in the pool (and alive in memory) for the whole life of the committed call, so the unary call
/// "overflowed", committed at once and was never retried.
#[tokio::test(start_paused = true)]
async fn commit_frees_the_unsent_part_of_the_retry_buffer() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            if s.path == "/t.S/Bidi" {
                // Read one chunk, send the response headers (the client commits), then stop reading.
                if s.read_bytes(1).await.is_ok() {
                    let _send = s.headers();
                    s.wait_reset().await;
                }
                return;
            }
            // Unary: the first attempt fails UNAVAILABLE, a retry succeeds.
            let first = s.previous_attempts().is_none();
            if s.read_to_end().await.is_err() {
                return;
            }
            if first {
                s.trailers_only("14", &[]);
            } else {
                s.ok(b"retried");
            }
        }),
    )
    .await;
    let ch = Channel::builder(server.target())
        .default_service_config(retry(3, &["UNAVAILABLE"]).service(SVC))
        .service_config_lookup(false)
        .retry_buffer_size(300 << 10)
        .build()
        .expect("channel");
    let outcome = tokio::time::timeout(GUARD, async {
        let (mut tx, mut rx) = ch
            .streaming_raw("/t.S/Bidi", Request::new(()))
            .await
            .expect("start");
        tx.send(Bytes::from(vec![1u8; 250 << 10]))
            .await
            .expect("send");
        rx.headers().await.expect("the long-lived call committed");
        settle(Duration::from_millis(100)).await;
        // The long-lived call is committed: it can never be replayed, so it should hold no retry buffer.
        let r = ch
            .unary_raw(
                "/t.S/Unary",
                Request::new(Bytes::from(vec![2u8; 100 << 10])),
            )
            .await;
        let attempts = server.opens().len() - 1;
        // Control: once the long-lived call ends (its state machine dropped), the same unary call retries.
        drop((tx, rx));
        settle(Duration::from_millis(100)).await;
        let control = ch
            .unary_raw(
                "/t.S/Unary",
                Request::new(Bytes::from(vec![2u8; 100 << 10])),
            )
            .await;
        (r, attempts, control)
    })
    .await
    .expect("guard");
    let (outcome, attempts, control) = outcome;
    assert_eq!(
        &control
            .expect("control: retried once the long-lived call ended")
            .into_message()[..],
        b"retried"
    );
    let unary = attempts;
    let r = outcome.unwrap_or_else(|status| {
        panic!(
            "the unary call was not retried ({status:?}; {unary} attempt(s)): a committed call still holds its retry buffer"
        )
    });
    assert_eq!(&r.into_message()[..], b"retried");
}

/// 500 concurrent bidi calls under a retry policy, through a server allowing 100 streams at a time, the first
/// attempt of each failing after its first message: all finish OK with their messages replayed, every
/// server stream is closed, and the driver tasks are gone afterwards.
#[tokio::test(start_paused = true)]
async fn five_hundred_concurrent_bidi_calls_with_a_policy_all_finish_and_leave_no_tasks() {
    let _dog = watchdog("500 bidi calls", 240);
    fn hundred(b: &mut h2::server::Builder) {
        b.max_concurrent_streams(100);
    }
    let server = H2Server::tcp(
        hundred,
        handler(|mut s: Stream| async move {
            if s.prev() == 0 {
                if s.read_bytes(5 + 2).await.is_ok() {
                    s.trailers_only("14", &[]);
                    s.log_end();
                }
                return;
            }
            let Some(mut out) = s.headers() else { return };
            let mut buf = Vec::new();
            loop {
                match s.recv.data().await {
                    Some(Ok(chunk)) => {
                        let _ = s.recv.flow_control().release_capacity(chunk.len());
                        buf.extend_from_slice(&chunk);
                        while buf.len() >= 5 {
                            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
                            if buf.len() < 5 + len {
                                break;
                            }
                            let m: Vec<u8> = buf.drain(..5 + len).skip(5).collect();
                            let _ = out.send_data(grpc_message(&m), false);
                        }
                    }
                    Some(Err(e)) => {
                        s.log_err(&e);
                        return;
                    }
                    None => break,
                }
            }
            let _ = out.send_trailers(trailers("0", &[]));
            s.log_end();
        }),
    )
    .await;
    let ch = channel_with_config(
        &server.target(),
        retry(3, &["UNAVAILABLE"]).service(SVC).max_backoff("10s"),
    );
    // Warm up: the connection and its tasks exist before the baseline.
    let s = guarded(
        "warm-up",
        call_shape(&ch, Shape::Bidi, "/t.S/Echo", Duration::from_secs(30)),
    )
    .await;
    assert_eq!(s.code(), Code::Ok, "{s:?}");
    settle(Duration::from_millis(200)).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let baseline = metrics.num_alive_tasks();

    let mut calls = Vec::new();
    for i in 0..500u32 {
        let ch = ch.clone();
        calls.push(tokio::spawn(async move {
            let (mut tx, mut rx) = ch
                .streaming_raw(
                    "/t.S/Echo",
                    Request::new(()).with_timeout(Duration::from_secs(120)),
                )
                .await?;
            let ms: Vec<Bytes> = (0..3u32)
                .map(|k| Bytes::from(format!("{:02}", (i * 3 + k) % 100)))
                .collect();
            for m in &ms {
                tx.send(m.clone()).await?;
            }
            tx.finish().await?;
            let mut got = Vec::new();
            while let Some(m) = rx.message().await? {
                got.push(m);
            }
            assert_eq!(got, ms, "call {i}");
            Ok::<(), Status>(())
        }));
    }
    let mut failures = Vec::new();
    for (i, c) in calls.into_iter().enumerate() {
        match guarded("500 calls", c).await.expect("join") {
            Ok(()) => {}
            Err(s) => failures.push((i, s)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    settle(Duration::from_millis(500)).await;
    let opened = server.opens().len();
    let closed = server
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::End { conn, id } => Some((*conn, *id)),
            Event::Reset(r) => Some((r.conn, r.id)),
            _ => None,
        })
        .collect::<std::collections::HashSet<_>>()
        .len();
    let mut by_prev: HashMap<String, usize> = HashMap::new();
    for o in server.opens() {
        let p = o
            .headers
            .get("grpc-previous-rpc-attempts")
            .map(|v| v.to_str().unwrap_or("?").to_owned())
            .unwrap_or_default();
        *by_prev.entry(p).or_default() += 1;
    }
    // Every call (and the warm-up) succeeded on exactly one policy retry. Some first attempts never reached
    // the handler: h2's server refuses (REFUSED_STREAM) a stream over its limit while it still counts a
    // stream the client already considers closed; those get A6's one transparent retry, then the policy.
    assert_eq!(by_prev.get("1"), Some(&501), "{by_prev:?}");
    assert_eq!(by_prev.len(), 2, "{by_prev:?}");
    assert_eq!(closed, opened, "every server stream ended");
    let alive = metrics.num_alive_tasks();
    eprintln!("alive tasks: baseline {baseline}, after {alive}");
    assert!(
        alive <= baseline,
        "tasks alive after the calls: {alive}, before: {baseline} (driver tasks left behind?)"
    );
}
