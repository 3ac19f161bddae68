//! gRFC A6 transparent retries, for every call shape, with and without a retry policy, over real sockets on
//! tokio's paused clock. A stream the server's HTTP/2 stack refused (RST_STREAM(REFUSED_STREAM)) or left out
//! of a GOAWAY (id above last-stream-id) reached the server but not its application: it is retried at once,
//! once per call, without counting as an attempt (no `grpc-previous-rpc-attempts` bump, not toward
//! maxAttempts, not a throttling failure). A stream that never left the client (queued behind
//! MAX_CONCURRENT_STREAMS when a GOAWAY came) is retried too. Requests h2 refuses to send are not retried.
//! `retries(false)` turns the policy off but keeps transparent retries.

use grpc_test_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Request, Status};
use h2::Reason;
use interop::faulty::{
    methods, AttemptOutcome, FaultyServer, FlakyItem, FlakyMessage, FlakyTotals,
};
use interop::raw::{Behaviour, Close, RawServer, Trigger};
use support::channel_with_config;
use support::config::{hedging_config, retry, retry_config};
use support::flaky::{
    attempts, channel_with, ended, flaky_request, flaky_unary, messages, target_of,
};
use support::frames::payloads;
use support::guards::{eventually, guarded, GUARD};
use support::h2_server::{defaults, handler, H2Server, Stream};
use support::IterStream;
use tokio::sync::Notify;

const REFUSE_ONCE: [(&str, &str); 2] = [("x-fail-times", "1"), ("x-fail-mode", "refuse")];

fn no_policy(server: &FaultyServer) -> Channel {
    channel_with(&server.target(), None, |b| b)
}

/// A unary call; its `x-attempt` trailer (the answering attempt, as the server counts).
async fn unary(ch: &Channel, key: &str, headers: &[(&str, &str)]) -> Result<String, Status> {
    guarded(
        "unary",
        ch.unary_raw(
            methods::FLAKY,
            flaky_request(Request::new(Bytes::new()), key, headers),
        ),
    )
    .await
    .map(|r| r.trailers().get("x-attempt").unwrap_or_default().to_owned())
}

async fn client_stream(
    ch: &Channel,
    key: &str,
    sizes: &[usize],
    headers: &[(&str, &str)],
) -> Result<FlakyTotals, Status> {
    let (msgs, _) = messages(sizes);
    guarded(
        "client streaming",
        ch.client_streaming::<FlakyMessage, FlakyTotals, _>(
            methods::FLAKY_CLIENT_STREAM,
            flaky_request(Request::new(IterStream(msgs.into_iter())), key, headers),
        ),
    )
    .await
    .map(|r| *r.message())
}

async fn server_stream(
    ch: &Channel,
    key: &str,
    headers: &[(&str, &str)],
) -> Result<Vec<FlakyItem>, Status> {
    let resp = guarded(
        "server streaming",
        ch.server_streaming::<FlakyMessage, FlakyItem>(
            methods::FLAKY_SERVER_STREAM,
            flaky_request(Request::new(FlakyMessage::default()), key, headers),
        ),
    )
    .await?;
    let mut stream = resp.into_message();
    let mut items = Vec::new();
    while let Some(item) = guarded("item", stream.message()).await? {
        items.push(item);
    }
    Ok(items)
}

/// A bidi call that sends `sent`, half-closes, and collects the echoes and the `x-attempt` trailer.
async fn bidi(
    ch: &Channel,
    key: &str,
    sent: &[&'static [u8]],
    headers: &[(&str, &str)],
) -> Result<(Vec<Bytes>, Option<String>), Status> {
    let (mut tx, mut rx) = guarded(
        "start",
        ch.streaming_raw(
            methods::FLAKY_BIDI,
            flaky_request(Request::new(()), key, headers),
        ),
    )
    .await?;
    for m in sent {
        if guarded("send", tx.send(Bytes::from_static(m)))
            .await
            .is_err()
        {
            break;
        }
    }
    let _ = guarded("finish", tx.finish()).await;
    let mut echoes = Vec::new();
    while let Some(m) = guarded("echo", rx.message()).await? {
        echoes.push(m);
    }
    let attempt = rx
        .trailers()
        .and_then(|t| t.get("x-attempt"))
        .map(str::to_owned);
    Ok((echoes, attempt))
}

fn two_first_attempts() -> Vec<(u32, Option<String>)> {
    vec![(1, None), (2, None)]
}

// --- REFUSED_STREAM, no policy, every shape ---

#[tokio::test(start_paused = true)]
async fn unary_refused_stream_is_retried_transparently_without_a_policy() {
    let server = support::faulty_server().await;
    let ch = no_policy(&server);
    let attempt = unary(&ch, "k", &REFUSE_ONCE)
        .await
        .expect("transparent retry");
    assert_eq!(attempt, "2");
    assert_eq!(
        attempts(&[&server], "k"),
        two_first_attempts(),
        "a transparent retry carries no grpc-previous-rpc-attempts"
    );
}

#[tokio::test(start_paused = true)]
async fn client_streaming_refused_stream_is_retried_transparently_without_a_policy() {
    let server = support::faulty_server().await;
    let ch = no_policy(&server);
    let (_, bytes) = messages(&[5, 50, 500]);
    let totals = client_stream(&ch, "k", &[5, 50, 500], &REFUSE_ONCE)
        .await
        .expect("transparent retry");
    assert_eq!(
        totals,
        FlakyTotals {
            messages: 3,
            bytes,
            attempt: 2
        },
        "every message was replayed"
    );
    assert_eq!(attempts(&[&server], "k"), two_first_attempts());
    assert_eq!(ended(&server, "k")[0].outcome, AttemptOutcome::Refused);
}

#[tokio::test(start_paused = true)]
async fn server_streaming_refused_stream_is_retried_transparently_without_a_policy() {
    let server = support::faulty_server().await;
    let ch = no_policy(&server);
    let mut headers = REFUSE_ONCE.to_vec();
    headers.push(("x-response-count", "2"));
    let items = server_stream(&ch, "k", &headers)
        .await
        .expect("transparent retry");
    let want: Vec<FlakyItem> = (0..2)
        .map(|index| FlakyItem {
            index,
            client_attempt: 1,
            attempt: 2,
        })
        .collect();
    assert_eq!(
        items, want,
        "the client still counts it as its first attempt"
    );
    assert_eq!(attempts(&[&server], "k"), two_first_attempts());
}

#[tokio::test(start_paused = true)]
async fn bidi_refused_stream_is_retried_transparently_without_a_policy() {
    let server = support::faulty_server().await;
    let ch = no_policy(&server);
    let (echoes, attempt) = bidi(&ch, "k", &[b"one", b"two"], &REFUSE_ONCE)
        .await
        .expect("transparent retry");
    assert_eq!(echoes, vec![&b"one"[..], &b"two"[..]]);
    assert_eq!(attempt.as_deref(), Some("2"));
    assert_eq!(attempts(&[&server], "k"), two_first_attempts());
    assert_eq!(ended(&server, "k")[1].messages, 2, "both messages replayed");
}

// --- Once per call, never after a processed attempt ---

#[tokio::test(start_paused = true)]
async fn a_second_refused_stream_is_not_retried_transparently() {
    let server = support::faulty_server().await;
    let ch = no_policy(&server);
    let status = unary(
        &ch,
        "k",
        &[("x-fail-times", "2"), ("x-fail-mode", "refuse")],
    )
    .await
    .expect_err("one transparent retry per call");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(attempts(&[&server], "k"), two_first_attempts());
}

#[tokio::test(start_paused = true)]
async fn a_refusal_after_a_processed_attempt_goes_to_the_retry_policy() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b,
    );
    let attempt = unary(&ch, "k", &[("x-attempt-script", "14,refuse")])
        .await
        .expect("the policy's third attempt");
    assert_eq!(attempt, "3");
    assert_eq!(
        attempts(&[&server], "k"),
        vec![(1, None), (2, Some("1".into())), (3, Some("2".into()))],
        "the refused attempt counted as a policy attempt: no transparent retry after a processed one"
    );
}

#[tokio::test(start_paused = true)]
async fn a_refusal_after_a_processed_attempt_uses_up_max_attempts() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(2, &["UNAVAILABLE"])),
        |b| b,
    );
    let status = unary(&ch, "k", &[("x-attempt-script", "14,refuse")])
        .await
        .expect_err("two policy attempts, both failed");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        attempts(&[&server], "k"),
        vec![(1, None), (2, Some("1".into()))]
    );
}

#[tokio::test(start_paused = true)]
async fn a_transparent_retry_does_not_count_toward_max_attempts() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(2, &["UNAVAILABLE"])),
        |b| b,
    );
    let status = client_stream(&ch, "k", &[10, 20], &[("x-attempt-script", "refuse,14,14")])
        .await
        .expect_err("both policy attempts fail");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        attempts(&[&server], "k"),
        vec![(1, None), (2, None), (3, Some("1".into()))],
        "refused, then maxAttempts (2) policy attempts"
    );
}

#[tokio::test(start_paused = true)]
async fn a_transparent_retry_is_not_a_throttling_failure() {
    let server = support::faulty_server().await;
    // 3 tokens, threshold 1.5: one failure leaves 2 (retry allowed); two would leave 1 (throttled).
    let config = retry(3, &["UNAVAILABLE"]).throttling(3, "0.1").to_string();
    let ch = channel_with(&server.target(), Some(&config), |b| b);
    let attempt = unary(&ch, "k", &[("x-attempt-script", "refuse,14")])
        .await
        .expect("the refusal cost no token, so the UNAVAILABLE is retried");
    assert_eq!(attempt, "3");
    assert_eq!(
        attempts(&[&server], "k"),
        vec![(1, None), (2, None), (3, Some("1".into()))]
    );
}

// --- GOAWAY with the stream above last-stream-id: a new connection ---

async fn goaway_server(close: Close) -> (RawServer, FaultyServer) {
    let faulty = FaultyServer::detached();
    let raw = RawServer::start(
        vec![Behaviour::GoawayBelowFirstStream { close }],
        Behaviour::Faulty(faulty.clone()),
    )
    .await
    .expect("raw server");
    (raw, faulty)
}

fn assert_retried_on_a_new_connection(raw: &RawServer, faulty: &FaultyServer, key: &str) {
    assert_eq!(
        raw.headers_received(),
        vec![(1, 1)],
        "the first attempt went out once, on the first connection"
    );
    assert_eq!(raw.connections(), 2, "the retry used a new connection");
    assert_eq!(
        attempts(&[faulty], key),
        vec![(1, None)],
        "the application saw one attempt, as a first attempt"
    );
}

#[tokio::test(start_paused = true)]
async fn unary_goaway_above_the_stream_is_retried_on_a_new_connection() {
    let (raw, faulty) = goaway_server(Close::After(Duration::from_millis(100))).await;
    let ch = channel_with(&raw.target(), None, |b| b);
    let attempt = unary(&ch, "k", &[]).await.expect("transparent retry");
    assert_eq!(attempt, "1");
    assert_retried_on_a_new_connection(&raw, &faulty, "k");
}

#[tokio::test(start_paused = true)]
async fn unary_goaway_above_the_stream_is_retried_when_the_server_keeps_the_connection_open() {
    let (raw, faulty) = goaway_server(Close::WhenClientCloses).await;
    let ch = channel_with(&raw.target(), None, |b| b);
    let attempt = unary(&ch, "k", &[]).await.expect("transparent retry");
    assert_eq!(attempt, "1");
    assert_retried_on_a_new_connection(&raw, &faulty, "k");
}

#[tokio::test(start_paused = true)]
async fn client_streaming_goaway_above_the_stream_is_retried_on_a_new_connection() {
    let (raw, faulty) = goaway_server(Close::After(Duration::from_millis(100))).await;
    let ch = channel_with(&raw.target(), None, |b| b);
    let totals = client_stream(&ch, "k", &[1, 2, 3], &[])
        .await
        .expect("transparent retry");
    assert_eq!(totals.messages, 3, "every message replayed");
    assert_retried_on_a_new_connection(&raw, &faulty, "k");
}

#[tokio::test(start_paused = true)]
async fn bidi_goaway_above_the_stream_is_retried_when_the_server_keeps_the_connection_open() {
    let (raw, faulty) = goaway_server(Close::WhenClientCloses).await;
    let ch = channel_with(&raw.target(), None, |b| b);
    let (echoes, _) = bidi(&ch, "k", &[b"one", b"two"], &[])
        .await
        .expect("transparent retry");
    assert_eq!(echoes, vec![&b"one"[..], &b"two"[..]]);
    assert_retried_on_a_new_connection(&raw, &faulty, "k");
}

// --- A stream that never left the client ---

/// Call 1 is held by a server allowing one stream at a time; call 2 waits in the client for a free stream;
/// the server's GOAWAY covers call 1 and cuts call 2 off. Returns how each call ended, and the servers.
async fn queued_behind_max_concurrent_streams(
    close: Close,
) -> (
    Result<String, Status>,
    Result<String, Status>,
    RawServer,
    FaultyServer,
) {
    let faulty = FaultyServer::detached();
    let goaway = Arc::new(Notify::new());
    let raw = RawServer::start(
        vec![Behaviour::MaxConcurrentOne {
            goaway: Trigger::Notified(goaway.clone()),
            close,
        }],
        Behaviour::Faulty(faulty.clone()),
    )
    .await
    .expect("raw server");
    let ch = channel_with(&raw.target(), None, |b| b);
    let held = {
        let ch = ch.clone();
        tokio::spawn(async move { unary(&ch, "held", &[]).await })
    };
    eventually("the first call's HEADERS reach the server", || {
        !raw.headers_received().is_empty()
    })
    .await;
    let queued = {
        let ch = ch.clone();
        tokio::spawn(async move { unary(&ch, "queued", &[]).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        raw.headers_received(),
        vec![(1, 1)],
        "the second call waits in the client for a free stream"
    );
    goaway.notify_one();
    let queued = guarded("queued call", queued).await.expect("task");
    let held = guarded("held call", held).await.expect("task");
    (held, queued, raw, faulty)
}

#[tokio::test(start_paused = true)]
async fn a_call_queued_behind_max_concurrent_streams_and_cut_off_by_goaway_is_retried() {
    let (held, queued, raw, faulty) =
        queued_behind_max_concurrent_streams(Close::After(Duration::from_millis(100))).await;
    assert_eq!(queued.expect("retried on a new connection"), "1");
    assert_eq!(attempts(&[&faulty], "queued"), vec![(1, None)]);
    assert_eq!(raw.connections(), 2);
    // The held call was covered by the GOAWAY (it may have been processed): with no policy, the closed
    // connection ends it UNAVAILABLE, and it is not retried.
    let status = held.expect_err("ended by the closed connection");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(attempts(&[&faulty], "held").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_call_cut_off_by_goaway_goes_to_a_new_connection_while_the_old_one_drains() {
    // The server never closes: the held stream keeps the old connection alive, so only a new connection
    // can carry the retried call.
    let (held, queued, raw, faulty) =
        queued_behind_max_concurrent_streams(Close::WhenClientCloses).await;
    assert_eq!(queued.expect("retried on a new connection"), "1");
    assert_eq!(attempts(&[&faulty], "queued"), vec![(1, None)]);
    assert_eq!(raw.connections(), 2);
    let status = held.expect_err("never answered");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(attempts(&[&faulty], "held").is_empty());
}

// --- Requests h2 refuses to send ---

/// HTTP/1 connection-specific headers, which h2 refuses to send, cannot even be added as metadata: the
/// request can never be malformed. (Should anything still reach h2 that it refuses, the attempt ends at
/// once with INTERNAL and is never retried: `attempt::tests`, `grpc-transparent`'s h2 behaviour tests and
/// `grpc-retry`'s Local timeline show each layer.)
#[tokio::test(start_paused = true)]
async fn metadata_h2_would_refuse_is_refused_when_added() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(5, &["UNAVAILABLE", "INTERNAL"])),
        |b| b,
    );
    for key in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
    ] {
        let mut req = Request::new(Bytes::new());
        assert_eq!(
            req.metadata_mut().append(key, "x"),
            Err(grpc_channel::MetadataError::ReservedKey(key.to_owned())),
            "{key}"
        );
    }
    // The channel is fine.
    unary(&ch, "after", &[]).await.expect("a good call");
    assert_eq!(attempts(&[&server], "after"), vec![(1, None)]);
}

// --- retries(false) ---

#[tokio::test(start_paused = true)]
async fn retries_disabled_ignores_the_retry_policy() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b.retries(false),
    );
    let status = unary(&ch, "unary", &[("x-fail-times", "1")])
        .await
        .expect_err("not retried");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(attempts(&[&server], "unary"), vec![(1, None)]);
    let status = client_stream(&ch, "stream", &[10], &[("x-fail-times", "1")])
        .await
        .expect_err("not retried");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(attempts(&[&server], "stream"), vec![(1, None)]);
}

#[tokio::test(start_paused = true)]
async fn retries_disabled_sends_no_hedges() {
    let a = support::faulty_server().await;
    let b = support::faulty_server().await;
    let ch = channel_with(
        &target_of(&[&a, &b]),
        Some(&hedging_config(3, "0.1s")),
        |b| b.retries(false),
    );
    let request = flaky_request(Request::new(Bytes::new()), "k", &[("x-hang-attempts", "1")])
        .with_timeout(Duration::from_secs(1));
    let status = guarded("unary", ch.unary_raw(methods::FLAKY, request))
        .await
        .expect_err("the original hangs and no hedge goes out");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_eq!(attempts(&[&a, &b], "k"), vec![(1, None)]);
}

#[tokio::test(start_paused = true)]
async fn retries_disabled_still_retries_a_refused_stream_transparently() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b.retries(false),
    );
    let attempt = unary(&ch, "unary", &REFUSE_ONCE)
        .await
        .expect("transparent retry");
    assert_eq!(attempt, "2");
    assert_eq!(attempts(&[&server], "unary"), two_first_attempts());
    let (echoes, attempt) = bidi(&ch, "bidi", &[b"one"], &REFUSE_ONCE)
        .await
        .expect("transparent retry");
    assert_eq!(echoes, vec![&b"one"[..]]);
    assert_eq!(attempt.as_deref(), Some("2"));
    assert_eq!(attempts(&[&server], "bidi"), two_first_attempts());
}

// --- A refusal under a retry policy; a refused streamed request replayed whole ---

#[tokio::test(start_paused = true)]
async fn a_refused_stream_is_retried_transparently() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(2, &["UNAVAILABLE"])),
        |b| b,
    );
    let r = flaky_unary(
        &ch,
        "k",
        &[("x-fail-times", "1"), ("x-fail-mode", "refuse")],
    )
    .await
    .expect("transparent retry");
    assert_eq!(r.trailers().get("x-attempt"), Some("2"));
    assert_eq!(
        attempts(&[&server], "k"),
        vec![(1, None), (2, None)],
        "a transparent retry does not count as a previous attempt"
    );
}

/// A client-streaming call without any policy whose first attempt is refused (REFUSED_STREAM) after
/// the whole request was written is retried once, transparently: every message replayed in order, one
/// END_STREAM, and no `grpc-previous-rpc-attempts`.
#[tokio::test(start_paused = true)]
async fn refused_stream_replays_the_streamed_request_transparently() {
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    let server = H2Server::tcp(
        defaults,
        handler(move |mut s: Stream| {
            let n = s2.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 0 {
                    // Wait for the whole request, then refuse.
                    let _ = s.read_to_end().await;
                    s.respond.send_reset(Reason::REFUSED_STREAM);
                    return;
                }
                if s.read_to_end().await.is_ok() {
                    s.ok(b"second");
                }
            }
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), "{}");
    let outcome = tokio::time::timeout(GUARD, async {
        let (mut tx, mut rx) = ch
            .streaming_raw("/t.S/Bidi", Request::new(()))
            .await
            .expect("start");
        for i in 0..5u8 {
            tx.send(Bytes::from(vec![i; 10])).await.expect("send");
        }
        tx.finish().await.expect("finish");
        let reply = rx.message().await.expect("reply").expect("message");
        assert_eq!(&reply[..], b"second");
    })
    .await;
    assert!(outcome.is_ok(), "{:?}", server.events());
    let opens = server.opens();
    assert_eq!(opens.len(), 2, "{opens:?}");
    assert_eq!(
        opens[1].previous_attempts(),
        None,
        "a transparent retry is not a previous attempt"
    );
    let (body, ends) = server.body_of_id(opens[1].id);
    let want: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 10]).collect();
    assert_eq!(payloads(&body), want);
    assert_eq!(ends, 1);
}
