//! The hostile-server suite (issue "Reliability", item 7): raw-frame servers ([`interop::raw`]) send what h2's
//! server API cannot (floods of PING, SETTINGS, CONTINUATION and WINDOW_UPDATE frames, DATA after trailers or
//! on closed streams, contradictory GOAWAYs, silence, an HTTP/1.1 answer, endless responses, oversized header
//! lists). Each case must:
//! * end in a documented status (`call.rs` module docs, `Status::from_h2`, spec §3) within bounded time (every
//!   call runs under a guard; deadline cases check the end against the deadline on tokio's paused clock);
//! * keep the client's memory bounded: the process's anonymous resident memory (`RssAnon`, sampled every 2 ms
//!   by a thread) must not grow by more than [`RSS_BUDGET`] during the case;
//! * leave other connections alone: a healthy channel to another server calls in a loop for the whole case,
//!   and every one of its calls must succeed.
//!
//! Most raw servers answer every later connection (and, when it survives, every later stream) properly
//! ([`Behaviour::ServeOk`]), so a follow-up call on the same channel shows whether the channel recovered and
//! whether the connection survived.

use grpc_test_support as support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Request, Response, Status};
use interop::faulty::{methods, FaultyServer};
use interop::raw::{self, kind, Behaviour, Close, RawServer, Window, FLAG_ACK};
use support::guards::{eventually, no_hang};
use support::{channel, faulty_server};
use tokio::time::Instant;

/// The path of the hostile calls (the raw servers answer any path).
const PATH: &str = "/hostile.Test/Call";

/// How much the process's resident memory may grow during one case.
const RSS_BUDGET: u64 = 64 << 20;

/// How late after its deadline a call may end.
const DEADLINE_SLACK: Duration = Duration::from_millis(100);

// --- Harness ---

/// The process's anonymous resident memory (heap and stacks; not the binary's code pages, which other tests
/// fault in), from `/proc/self/status`.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("RssAnon:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Samples the resident set on a thread of its own (independent of the runtime, which a flood may keep
/// busy), keeping the peak.
struct RssWatch {
    start: u64,
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssWatch {
    fn start() -> RssWatch {
        let start = rss_bytes();
        let peak = Arc::new(AtomicU64::new(start));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (peak, stop) = (peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(rss_bytes(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        };
        RssWatch {
            start,
            peak,
            stop,
            thread: Some(thread),
        }
    }

    /// How much the resident set grew at its peak.
    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak
            .load(Ordering::Relaxed)
            .max(rss_bytes())
            .saturating_sub(self.start)
    }
}

/// A healthy server and channel, calling in a loop (every 10 ms) for the whole case.
struct Healthy {
    ch: Channel,
    _server: FaultyServer,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(usize, Vec<Status>)>,
}

impl Healthy {
    async fn start() -> Healthy {
        let server = faulty_server().await;
        let ch = channel(server.addr);
        // Connected before the hostile case starts.
        no_hang("the first healthy call", healthy_call(&ch))
            .await
            .expect("the healthy server answers");
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let (ch, stop) = (ch.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut ok, mut failed) = (0, Vec::new());
                // At least one call, however short the case.
                loop {
                    match healthy_call(&ch).await {
                        Ok(_) => ok += 1,
                        Err(status) => failed.push(status),
                    }
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                (ok, failed)
            })
        };
        Healthy {
            ch,
            _server: server,
            stop,
            task,
        }
    }

    async fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        let (ok, failed) = no_hang("the healthy loop", self.task)
            .await
            .expect("healthy loop task");
        eprintln!("healthy calls on another connection during the case: {ok} OK");
        assert!(
            failed.is_empty(),
            "calls on another connection failed during the case ({ok} succeeded): {failed:?}"
        );
        let after = no_hang("the last healthy call", healthy_call(&self.ch)).await;
        assert!(
            after.is_ok(),
            "the healthy channel after the case: {after:?}"
        );
    }
}

async fn healthy_call(ch: &Channel) -> Result<Response<Bytes>, Status> {
    ch.unary_raw(methods::ECHO_HEADERS, Request::new(Bytes::new()))
        .await
}

/// What every case checks around its own assertions: other connections unaffected, memory bounded.
struct Case {
    healthy: Healthy,
    rss: RssWatch,
}

impl Case {
    async fn start() -> Case {
        let healthy = Healthy::start().await;
        Case {
            healthy,
            rss: RssWatch::start(),
        }
    }

    async fn finish(self) {
        self.healthy.finish().await;
        let growth = self.rss.finish();
        eprintln!("anonymous resident memory growth: {} KiB", growth >> 10);
        assert!(
            growth < RSS_BUDGET,
            "anonymous resident memory grew by {} MiB during the case (budget {} MiB)",
            growth >> 20,
            RSS_BUDGET >> 20
        );
    }
}

/// One case's fixture: the checks around it ([`Case`]), a raw server, and a channel to that server.
struct Hostile {
    case: Case,
    raw: RawServer,
    ch: Channel,
}

impl Hostile {
    /// A raw server playing `first` on its first connection and answering every later one properly.
    async fn start(first: Behaviour) -> Hostile {
        Hostile::start_with(vec![first], Behaviour::ServeOk).await
    }

    /// A raw server playing `every` on every connection.
    async fn every(every: Behaviour) -> Hostile {
        Hostile::start_with(vec![], every).await
    }

    async fn start_with(first: Vec<Behaviour>, then: Behaviour) -> Hostile {
        let case = Case::start().await;
        let raw = RawServer::start(first, then).await.expect("raw server");
        let ch = channel(raw.addr);
        Hostile { case, raw, ch }
    }

    /// A unary call with an optional timeout, under the guard.
    async fn unary(&self, timeout: Option<Duration>) -> Result<Response<Bytes>, Status> {
        unary(&self.ch, timeout).await
    }

    /// A unary call without a deadline that must succeed; `what` says why.
    async fn call_succeeds(&self, what: &str) {
        let result = self.unary(None).await;
        assert!(result.is_ok(), "{what}: got {result:?}");
    }

    /// A unary call without a deadline that must fail: its status.
    async fn call_fails(&self, expected: &str) -> Status {
        error(self.unary(None).await, expected)
    }

    /// A unary call with `deadline` that must fail: its status, and how long it took.
    async fn call_fails_by(&self, deadline: Duration, expected: &str) -> (Status, Duration) {
        let start = Instant::now();
        let status = error(self.unary(Some(deadline)).await, expected);
        (status, start.elapsed())
    }

    /// A unary call with `deadline` that ends DEADLINE_EXCEEDED at the deadline.
    async fn call_ends_at_the_deadline(&self, deadline: Duration) {
        let (status, elapsed) = self.call_fails_by(deadline, "DEADLINE_EXCEEDED").await;
        assert_deadline_exceeded_on_time(&status, elapsed, deadline);
    }

    /// A unary call on the same channel after the case succeeds (on the surviving connection or a new one).
    async fn follow_up_succeeds(&self) {
        let after = self.unary(None).await;
        assert!(after.is_ok(), "a later call on the same channel: {after:?}");
    }

    /// The follow-up call succeeds on the connection of the case: it survived the flood.
    async fn survives_the_flood(&self) {
        self.follow_up_succeeds().await;
        assert_eq!(
            self.raw.connections(),
            1,
            "the connection survived the flood"
        );
    }

    /// The client ACKs exactly `count` frames of `frame_kind` (`what` names them).
    async fn acks(&self, frame_kind: u8, count: usize, what: &str) {
        eventually(&format!("the client ACKs every {what}"), || {
            self.raw.received_of(frame_kind, FLAG_ACK).len() >= count
        })
        .await;
        assert_eq!(
            self.raw.received_of(frame_kind, FLAG_ACK).len(),
            count,
            "{what} ACKs"
        );
    }

    /// One connection, and no connection error on it.
    fn assert_connection_survived(&self) {
        assert_eq!(self.raw.connections(), 1, "the connection survived");
        assert!(
            self.raw.goaways_received().is_empty(),
            "no connection error"
        );
    }

    /// The case's own checks are done: the checks around it.
    async fn finish(self) {
        self.case.finish().await;
    }
}

/// A unary call with an optional timeout, under the guard.
async fn unary(ch: &Channel, timeout: Option<Duration>) -> Result<Response<Bytes>, Status> {
    let mut req = Request::new(Bytes::from_static(b"request"));
    if let Some(t) = timeout {
        req = req.with_timeout(t);
    }
    no_hang("hostile call", ch.unary_raw(PATH, req)).await
}

/// The call's error (printed, for `--nocapture` runs), or a panic naming what was expected.
fn error(result: Result<Response<Bytes>, Status>, expected: &str) -> Status {
    match result {
        Ok(r) => panic!(
            "expected {expected}, got a response of {} bytes",
            r.message().len()
        ),
        Err(s) => {
            eprintln!("observed: {s:?}");
            s
        }
    }
}

fn assert_deadline_exceeded_on_time(status: &Status, elapsed: Duration, deadline: Duration) {
    assert_eq!(
        status.code(),
        Code::DeadlineExceeded,
        "expected DEADLINE_EXCEEDED at the {deadline:?} deadline, got {status:?} after {elapsed:?}"
    );
    assert!(
        elapsed >= deadline && elapsed < deadline + DEADLINE_SLACK,
        "expected the call to end at its {deadline:?} deadline (+{DEADLINE_SLACK:?}), it ended after \
         {elapsed:?}"
    );
}

/// The call ended with `early` before its deadline, or else DEADLINE_EXCEEDED at the deadline.
fn assert_early_or_deadline_exceeded(
    status: &Status,
    elapsed: Duration,
    deadline: Duration,
    early: Code,
) {
    if status.code() == early {
        assert!(
            elapsed < deadline,
            "{early:?} after the deadline: {elapsed:?}"
        );
    } else {
        assert_deadline_exceeded_on_time(status, elapsed, deadline);
    }
}

fn assert_message_has(status: &Status, parts: &[&str]) {
    for part in parts {
        assert!(
            status.message().contains(part),
            "the message of {status:?} lacks {part:?}"
        );
    }
}

/// The server broke a connection-level rule: the call ends INTERNAL naming `error` (`why` says which rule),
/// and the client closes the connection with GOAWAY(`code`) on stream 1.
async fn internal_connection_error(
    h: &Hostile,
    expected: &str,
    why: &str,
    error_name: &str,
    code: u32,
) {
    let status = h.call_fails(expected).await;
    assert_eq!(status.code(), Code::Internal, "{why}: {status:?}");
    assert_message_has(&status, &[error_name]);
    eventually(&format!("the client sends GOAWAY({error_name})"), || {
        h.raw.goaways_received().contains(&(1, code))
    })
    .await;
}

/// The first stream was not processed: it is retried transparently once, on a new connection, which answers.
async fn retried_once_on_a_new_connection(first: Behaviour) {
    let h = Hostile::start(first).await;
    h.call_succeeds("the transparent retry is answered").await;
    assert_eq!(h.raw.headers_received(), vec![(1, 1), (2, 1)]);
    h.finish().await;
}

/// The raw server playing `first` keeps answering past the `deadline`: the call ends DEADLINE_EXCEEDED at it.
async fn ends_at_the_deadline(first: Behaviour, deadline: Duration) {
    let h = Hostile::start(first).await;
    h.call_ends_at_the_deadline(deadline).await;
    h.finish().await;
}

// --- PING and SETTINGS floods: answered frame by frame; the call completes ---

/// h2 ACKs each PING before it reads the next frame, so the flood costs one pending ACK at a time and the
/// call completes OK on the same connection. (Documented outcome: the call completes.)
#[tokio::test]
async fn ping_flood_is_acknowledged_and_the_call_completes() {
    let h = Hostile::start(Behaviour::PingFlood { pings: 5000 }).await;
    h.call_succeeds("5,000 PINGs before the answer: the call completes")
        .await;
    h.acks(kind::PING, 5000, "PING").await;
    h.survives_the_flood().await;
    h.finish().await;
}

/// Same for SETTINGS: one pending ACK at a time; the call completes OK.
#[tokio::test]
async fn settings_flood_is_acknowledged_and_the_call_completes() {
    let h = Hostile::start(Behaviour::SettingsFlood { frames: 5000 }).await;
    h.call_succeeds("5,000 SETTINGS before the answer: the call completes")
        .await;
    // The server's first SETTINGS and the flood.
    h.acks(kind::SETTINGS, 5001, "SETTINGS").await;
    h.survives_the_flood().await;
    h.finish().await;
}

// --- CONTINUATION flood ---

/// A header block that never ends: h2 caps the CONTINUATION frames of one block (about the header-list limit
/// over the frame size, at least 5) and closes the connection with GOAWAY(ENHANCE_YOUR_CALM). The call ends
/// RESOURCE_EXHAUSTED (or INTERNAL) with a message naming the header block, the flood stops, memory stays
/// bounded, and the channel reconnects.
#[tokio::test]
async fn continuation_flood_is_cut_off_with_a_clear_status() {
    let h = Hostile::start(Behaviour::ContinuationFlood).await;
    let status = h.call_fails("the flood to fail the call").await;
    assert!(
        matches!(status.code(), Code::ResourceExhausted | Code::Internal),
        "expected RESOURCE_EXHAUSTED or INTERNAL, got {status:?}"
    );
    let message = status.message().to_lowercase();
    assert!(
        message.contains("continuation") || message.contains("header"),
        "the message names the endless header block: {status:?}"
    );
    eventually("the client closes the connection with a GOAWAY", || {
        !h.raw.goaways_received().is_empty()
    })
    .await;
    // The server's writes fail once the client has closed: the flood stops.
    let sent = h.raw.sent(kind::CONTINUATION);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        h.raw.sent(kind::CONTINUATION),
        sent,
        "the flood goes on: the client still reads it"
    );
    h.follow_up_succeeds().await;
    assert_eq!(
        h.raw.connections(),
        2,
        "the follow-up used a new connection"
    );
    h.finish().await;
}

// --- WINDOW_UPDATE flood and overflow ---

/// 10,000 WINDOW_UPDATEs of 1 on the connection and the stream are legal: the call completes OK.
#[tokio::test]
async fn window_update_flood_is_absorbed_and_the_call_completes() {
    let h = Hostile::start(Behaviour::WindowUpdateFlood {
        updates: 10_000,
        overflow: None,
    })
    .await;
    h.call_succeeds("legal WINDOW_UPDATEs").await;
    h.survives_the_flood().await;
    h.finish().await;
}

/// A WINDOW_UPDATE taking the connection window past 2^31 - 1 is a connection error FLOW_CONTROL_ERROR
/// (RFC 9113 §6.9.1): the client sends GOAWAY(FLOW_CONTROL_ERROR), and the call ends INTERNAL (spec §3,
/// "statuses the library produces": a flow-control violation is INTERNAL; `Status::from_h2`: a protocol
/// error h2 detected in what the server sent is INTERNAL), naming FLOW_CONTROL_ERROR.
#[tokio::test]
async fn connection_window_overflow_is_an_internal_flow_control_error() {
    let h = Hostile::start(Behaviour::WindowUpdateFlood {
        updates: 1000,
        overflow: Some(Window::Connection),
    })
    .await;
    internal_connection_error(
        &h,
        "a flow-control error",
        "a connection window overflow is a flow-control violation",
        "FLOW_CONTROL_ERROR",
        raw::FLOW_CONTROL_ERROR,
    )
    .await;
    h.follow_up_succeeds().await;
    h.finish().await;
}

/// A WINDOW_UPDATE taking an open stream's send window past 2^31 - 1 is a stream error: the client resets that
/// stream with FLOW_CONTROL_ERROR, the call ends INTERNAL naming it, and the connection survives (the
/// follow-up call uses it). The call is a streaming one that has not half-closed: h2 ignores WINDOW_UPDATEs on
/// a stream whose sending side is closed.
#[tokio::test]
async fn stream_window_overflow_resets_only_that_stream() {
    let h = Hostile::start(Behaviour::WindowUpdateFlood {
        updates: 1000,
        overflow: Some(Window::Stream),
    })
    .await;
    let (mut tx, mut rx) = no_hang("start", h.ch.streaming_raw(PATH, Request::new(())))
        .await
        .expect("the call starts");
    // The stream stays open for sending: no half-close.
    let _ = no_hang("send", tx.send(Bytes::from_static(b"request"))).await;
    let status = loop {
        match no_hang("message", rx.message()).await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("expected a flow-control error, the call ended OK"),
            Err(status) => {
                eprintln!("observed: {status:?}");
                break status;
            }
        }
    };
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert_message_has(&status, &["FLOW_CONTROL_ERROR"]);
    eventually(
        "the client resets the stream with FLOW_CONTROL_ERROR",
        || {
            h.raw
                .resets_received()
                .contains(&(1, 1, raw::FLOW_CONTROL_ERROR))
        },
    )
    .await;
    drop(tx);
    h.follow_up_succeeds().await;
    assert_eq!(
        h.raw.connections(),
        1,
        "a stream error leaves the connection up"
    );
    h.finish().await;
}

// --- DATA after trailers, on a closed stream, on a reset stream ---

/// The trailers fix the call's status: a DATA frame after them (a connection error for the client's h2)
/// cannot turn the completed call into a failure. The channel then recovers.
#[tokio::test]
async fn data_after_trailers_does_not_change_the_status() {
    let h = Hostile::start(Behaviour::DataAfterTrailers).await;
    let result = h.unary(None).await;
    let response = result.expect("the trailers said OK before the stray DATA");
    assert!(response.message().is_empty());
    h.follow_up_succeeds().await;
    h.finish().await;
}

/// DATA on a stream that ended long ago (both sides sent END_STREAM, the call is over): h2 answers
/// RST_STREAM(STREAM_CLOSED) and keeps the connection; the call on the next stream completes OK.
#[tokio::test]
async fn data_on_a_closed_stream_is_refused_and_the_connection_survives() {
    let h = Hostile::start(Behaviour::DataOnClosedStream).await;
    h.unary(None).await.expect("the first call is answered");
    h.call_succeeds("the call during which DATA came for the closed stream")
        .await;
    eventually("the client answers RST_STREAM(STREAM_CLOSED)", || {
        h.raw
            .resets_received()
            .contains(&(1, 1, raw::STREAM_CLOSED))
    })
    .await;
    h.assert_connection_survived();
    h.finish().await;
}

/// After the client reset a stream (the call's deadline passed), DATA and trailers that cross the reset must be
/// ignored (RFC 9113 §5.1): the connection survives and carries the next call.
#[tokio::test(start_paused = true)]
async fn data_on_a_stream_the_client_reset_is_ignored() {
    let h = Hostile::start(Behaviour::DataOnResetStream).await;
    h.call_ends_at_the_deadline(Duration::from_millis(500))
        .await;
    eventually("the client resets the stream with CANCEL", || {
        h.raw.resets_received().contains(&(1, 1, raw::CANCEL))
    })
    .await;
    // Let the late DATA and trailers reach the client.
    eventually("the server sends DATA on the reset stream", || {
        h.raw.sent(kind::DATA) >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    h.follow_up_succeeds().await;
    h.assert_connection_survived();
    h.finish().await;
}

// --- GOAWAY ---

/// A GOAWAY whose last-stream-id is below the open stream: the stream was not processed, and without a
/// policy it is retried transparently once, on a new connection, which answers.
#[tokio::test(start_paused = true)]
async fn goaway_below_an_open_stream_is_retried_once_on_a_new_connection() {
    retried_once_on_a_new_connection(Behaviour::GoawayBelowFirstStream {
        close: Close::WhenClientCloses,
    })
    .await;
}

/// Every connection sends a GOAWAY below the stream: one transparent retry, then UNAVAILABLE.
#[tokio::test(start_paused = true)]
async fn goaway_below_the_stream_on_every_connection_is_retried_only_once() {
    let h = Hostile::every(Behaviour::GoawayBelowFirstStream {
        close: Close::WhenClientCloses,
    })
    .await;
    let status = h.call_fails("UNAVAILABLE").await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        h.raw.headers_received(),
        vec![(1, 1), (2, 1)],
        "the first attempt and one transparent retry"
    );
    h.finish().await;
}

/// A GOAWAY below a stream whose response headers already came: the call had committed, so it is not
/// retried; it ends UNAVAILABLE (spec §3 GOAWAY: streams above last-stream-id fail UNAVAILABLE).
#[tokio::test(start_paused = true)]
async fn goaway_below_an_answered_stream_is_unavailable_and_not_retried() {
    let h = Hostile::start(Behaviour::GoawayBelowAnsweredStream).await;
    let status = h.call_fails("UNAVAILABLE").await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        h.raw.headers_received(),
        vec![(1, 1)],
        "a committed call is not retried"
    );
    h.follow_up_succeeds().await;
    h.finish().await;
}

/// GOAWAY(S) covers the stream, then GOAWAY(S + 2) raises the last-stream-id: a protocol error (RFC 9113
/// §6.8, grpc-go). The client closes the connection with GOAWAY(PROTOCOL_ERROR); the covered stream, maybe
/// processed, is not retried and ends INTERNAL naming PROTOCOL_ERROR (`Status::from_h2`: a protocol error h2
/// detected in what the server sent is INTERNAL).
#[tokio::test(start_paused = true)]
async fn increasing_goaway_ids_are_an_internal_protocol_error() {
    let h = Hostile::start(Behaviour::IncreasingGoaways {
        first_covers_stream: true,
    })
    .await;
    internal_connection_error(
        &h,
        "a protocol error",
        "the server broke the GOAWAY rules",
        "PROTOCOL_ERROR",
        raw::PROTOCOL_ERROR,
    )
    .await;
    assert_eq!(
        h.raw.headers_received(),
        vec![(1, 1)],
        "the covered stream may have been processed: not retried"
    );
    h.follow_up_succeeds().await;
    h.finish().await;
}

/// GOAWAY below the stream, then an increasing one: the stream was already cut off (unprocessed) and
/// retried on a new connection, which the old connection's protocol error does not touch.
#[tokio::test(start_paused = true)]
async fn a_stream_cut_off_before_an_increasing_goaway_is_retried() {
    retried_once_on_a_new_connection(Behaviour::IncreasingGoaways {
        first_covers_stream: false,
    })
    .await;
}

// --- A server that never sends SETTINGS ---

/// TCP accepted, then silence: the call ends at its deadline (DEADLINE_EXCEEDED), or earlier with a
/// fail-fast UNAVAILABLE if the channel gives up on the connection first.
#[tokio::test(start_paused = true)]
async fn silent_server_call_ends_by_its_deadline() {
    let h = Hostile::every(Behaviour::Silent).await;
    let deadline = Duration::from_secs(1);
    let (status, elapsed) = h.call_fails_by(deadline, "no answer").await;
    assert_early_or_deadline_exceeded(&status, elapsed, deadline, Code::Unavailable);
    h.finish().await;
}

/// With a 2 s connect timeout, the silent server's handshake (no SETTINGS, no PING ACK) is abandoned at 2 s:
/// the channel is in TRANSIENT_FAILURE and the fail-fast call ends UNAVAILABLE then, long before its 10 s
/// deadline, saying the connection attempt timed out.
#[tokio::test(start_paused = true)]
async fn connect_timeout_bounds_the_handshake_with_a_silent_server() {
    let case = Case::start().await;
    let raw = RawServer::start(vec![], Behaviour::Silent)
        .await
        .expect("raw server");
    let connect_timeout = Duration::from_secs(2);
    let ch = Channel::builder(format!("ipv4:{}", raw.addr))
        .connect_timeout(connect_timeout)
        .build()
        .expect("channel");
    let start = Instant::now();
    let status = error(
        unary(&ch, Some(Duration::from_secs(10))).await,
        "UNAVAILABLE at the connect timeout",
    );
    let elapsed = start.elapsed();
    assert!(
        status.code() == Code::Unavailable
            && elapsed >= connect_timeout
            && elapsed < connect_timeout + DEADLINE_SLACK,
        "expected UNAVAILABLE at the {connect_timeout:?} connect timeout, got {status:?} after {elapsed:?}"
    );
    assert!(
        status.message().contains("timed out"),
        "the message says the connection attempt timed out: {status:?}"
    );
    case.finish().await;
}

// --- Endless responses ---

/// Empty DATA frames every 50 ms (20 before the deadline, under h2's cap of 100 per connection): the call
/// ends DEADLINE_EXCEEDED at its deadline.
#[tokio::test(start_paused = true)]
async fn slow_empty_data_frames_end_at_the_deadline() {
    let slow = Behaviour::EmptyDataFrames {
        every: Duration::from_millis(50),
        per_tick: 1,
    };
    ends_at_the_deadline(slow, Duration::from_secs(1)).await;
}

/// A flood of empty DATA frames: h2 closes the connection after 100 (GOAWAY(ENHANCE_YOUR_CALM)), so the call
/// ends RESOURCE_EXHAUSTED before its deadline; at the latest it ends DEADLINE_EXCEEDED at the deadline.
#[tokio::test(start_paused = true)]
async fn an_empty_data_flood_ends_by_the_deadline() {
    let h = Hostile::start(Behaviour::EmptyDataFrames {
        every: Duration::from_millis(1),
        per_tick: 64,
    })
    .await;
    let deadline = Duration::from_secs(5);
    let (status, elapsed) = h.call_fails_by(deadline, "the flood to end the call").await;
    assert_early_or_deadline_exceeded(&status, elapsed, deadline, Code::ResourceExhausted);
    h.follow_up_succeeds().await;
    h.finish().await;
}

/// Messages keep flowing (256 bytes every 10 ms) past the deadline: the call ends DEADLINE_EXCEEDED at its
/// deadline, not when the data stops.
#[tokio::test(start_paused = true)]
async fn endless_messages_end_at_the_deadline() {
    let h = Hostile::start(Behaviour::EndlessMessages {
        every: Duration::from_millis(10),
        size: 256,
    })
    .await;
    let deadline = Duration::from_secs(1);
    let start = Instant::now();
    let (mut tx, mut rx) = no_hang(
        "start",
        h.ch.streaming_raw(PATH, Request::new(()).with_timeout(deadline)),
    )
    .await
    .expect("the call starts");
    no_hang("send", tx.send(Bytes::from_static(b"request")))
        .await
        .expect("send");
    no_hang("finish", tx.finish()).await.expect("half-close");
    let mut received = 0usize;
    let status = loop {
        match no_hang("message", rx.message()).await {
            Ok(Some(m)) => {
                assert_eq!(m.len(), 256);
                received += 1;
            }
            Ok(None) => panic!("the endless stream ended OK after {received} messages"),
            Err(status) => break status,
        }
    };
    assert_deadline_exceeded_on_time(&status, start.elapsed(), deadline);
    assert!(
        received >= 50,
        "messages flowed until the deadline: {received}"
    );
    h.finish().await;
}

/// One message that never completes (a 1 MiB prefix, then 100 bytes every 10 ms): the call ends
/// DEADLINE_EXCEEDED at its deadline.
#[tokio::test(start_paused = true)]
async fn a_trickling_message_ends_at_the_deadline() {
    let trickle = Behaviour::TrickleMessage {
        every: Duration::from_millis(10),
        chunk: 100,
    };
    ends_at_the_deadline(trickle, Duration::from_secs(1)).await;
}

// --- Not HTTP/2 at all ---

/// An HTTP/1.1 server answers the preface with "HTTP/1.1 400 Bad Request": the connection attempt fails, and
/// the fail-fast call ends UNAVAILABLE before its deadline, with a message saying the server does not speak
/// HTTP/2 (not a bare frame-size error).
#[tokio::test(start_paused = true)]
async fn http11_server_is_unavailable_saying_it_is_not_http2() {
    let h = Hostile::every(Behaviour::Http11).await;
    let deadline = Duration::from_secs(5);
    let (status, elapsed) = h.call_fails_by(deadline, "UNAVAILABLE").await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        elapsed < deadline,
        "fail-fast, not at the deadline: {elapsed:?}"
    );
    let message = status.message().to_lowercase();
    assert!(
        message.contains("http/1") || (message.contains("http/2") && message.contains("not")),
        "the message says the server does not speak HTTP/2: {status:?}"
    );
    h.finish().await;
}

// --- Response headers over the client's header-list limit (16 KiB) ---

async fn oversize_headers(value_len: usize) {
    let h = Hostile::start(Behaviour::OversizeHeaders { value_len }).await;
    let status = h.call_fails("a header-list limit status").await;
    assert!(
        matches!(status.code(), Code::ResourceExhausted | Code::Internal),
        "expected RESOURCE_EXHAUSTED (or INTERNAL), got {status:?}"
    );
    let message = status.message().to_lowercase();
    assert!(
        message.contains("header") && (message.contains("limit") || message.contains("16384")),
        "the message names the header-list limit: {status:?}"
    );
    assert!(
        !message.contains("too many frames"),
        "an oversized header list is not a frame flood: {status:?}"
    );
    h.follow_up_succeeds().await;
    h.finish().await;
}

/// A 20 KiB header value: over the 16 KiB limit (h2 resets the stream).
#[tokio::test]
async fn response_headers_over_the_limit_name_the_limit() {
    oversize_headers(20 << 10).await;
}

/// A 64 KiB header value: over four times the limit (h2 closes the connection with ENHANCE_YOUR_CALM); still
/// a header-list status, not "too many frames".
#[tokio::test]
async fn a_64k_response_header_names_the_limit_not_too_many_frames() {
    oversize_headers(64 << 10).await;
}
