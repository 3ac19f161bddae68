//! The A6 call path under stress: the retry driver, the commit handover and the call halves, over real
//! loopback sockets against a scriptable h2 server that logs every stream, DATA frame, END_STREAM and reset,
//! on tokio's paused clock. Pacing by the readiest attempt, bounded buffering while no attempt can write,
//! buffer release at commit, cancellation of a call abandoned before it returns, early Trailers-Only, order
//! and uniqueness of messages around a hedge's commit, half-close forms, huge timeouts. Every test is bounded
//! by a `tokio::time::timeout` guard, so a hang fails instead of blocking the run.

mod support;

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use grpc_channel::{Channel, Code, Request};
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use http::{HeaderMap, HeaderValue};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Paused-clock guard: long enough for any backoff here, short enough to turn a hang into a failure.
const GUARD: Duration = Duration::from_secs(600);

const SVC: &str = "review.Svc";
const BIDI: &str = "/review.Svc/Bidi";
const UNARY: &str = "/review.Svc/Unary";
const HOLD: &str = "/review.Svc/Hold";

// ---- a scriptable raw h2 server --------------------------------------------------------------------------

/// What the raw server saw.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Ev {
    /// A stream opened: connection number (1-based), stream id, `grpc-previous-rpc-attempts`.
    Open {
        conn: usize,
        id: u32,
        prev: Option<String>,
    },
    /// A DATA chunk.
    Data { id: u32, bytes: Bytes },
    /// END_STREAM from the client.
    End { id: u32 },
    /// RST_STREAM from the client.
    Reset { id: u32, reason: Reason },
}

type Log = Arc<Mutex<Vec<Ev>>>;

fn push(log: &Log, ev: Ev) {
    log.lock().expect("log").push(ev);
}

/// One stream the handler answers.
struct Stream {
    id: u32,
    prev: Option<String>,
    path: String,
    _headers: HeaderMap,
    recv: RecvStream,
    respond: SendResponse<Bytes>,
    log: Log,
}

type Handler = Arc<dyn Fn(Stream) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Stream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Arc::new(move |s| Box::pin(f(s)))
}

#[derive(Clone)]
struct Raw {
    addr: SocketAddr,
    log: Log,
    /// Notify to make every live connection start a graceful shutdown (GOAWAY 2^31-1, PING, GOAWAY last).
    goaway: Arc<Notify>,
    conns: Arc<AtomicUsize>,
}

impl Raw {
    async fn start(configure: fn(&mut h2::server::Builder), h: Handler) -> Raw {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        Raw::serve(listener, configure, h)
    }

    fn serve(listener: TcpListener, configure: fn(&mut h2::server::Builder), h: Handler) -> Raw {
        let raw = Raw {
            addr: listener.local_addr().expect("addr"),
            log: Arc::default(),
            goaway: Arc::new(Notify::new()),
            conns: Arc::default(),
        };
        let r = raw.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let n = r.conns.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::spawn(r.clone().connection(tcp, n, configure, h.clone()));
            }
        });
        raw
    }

    async fn connection(
        self,
        tcp: tokio::net::TcpStream,
        n: usize,
        configure: fn(&mut h2::server::Builder),
        h: Handler,
    ) {
        let mut b = h2::server::Builder::new();
        configure(&mut b);
        let Ok(mut conn) = b.handshake::<_, Bytes>(tcp).await else {
            return;
        };
        loop {
            tokio::select! {
                next = conn.accept() => match next {
                    Some(Ok((request, respond))) => {
                        let (parts, recv) = request.into_parts();
                        let id = u32::from(respond.stream_id());
                        let prev = parts
                            .headers
                            .get("grpc-previous-rpc-attempts")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned);
                        push(&self.log, Ev::Open { conn: n, id, prev: prev.clone() });
                        let s = Stream {
                            id,
                            prev,
                            path: parts.uri.path().to_owned(),
                            _headers: parts.headers,
                            recv,
                            respond,
                            log: self.log.clone(),
                        };
                        tokio::spawn(h(s));
                    }
                    _ => return,
                },
                () = self.goaway.notified() => conn.graceful_shutdown(),
            }
        }
    }

    fn events(&self) -> Vec<Ev> {
        self.log.lock().expect("log").clone()
    }

    fn opens(&self) -> Vec<(u32, Option<String>)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Ev::Open { id, prev, .. } => Some((id, prev)),
                _ => None,
            })
            .collect()
    }

    fn resets(&self) -> Vec<(u32, Reason)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Ev::Reset { id, reason } => Some((id, reason)),
                _ => None,
            })
            .collect()
    }

    /// The bytes the client sent on stream `id`, and how many END_STREAMs it saw.
    fn body(&self, id: u32) -> (Vec<u8>, usize) {
        let mut body = Vec::new();
        let mut ends = 0;
        for e in self.events() {
            match e {
                Ev::Data { id: i, bytes } if i == id => body.extend_from_slice(&bytes),
                Ev::End { id: i } if i == id => ends += 1,
                _ => {}
            }
        }
        (body, ends)
    }
}

fn defaults(_: &mut h2::server::Builder) {}

impl Stream {
    /// Reads DATA until END_STREAM (Ok) or a reset (Err), logging both; releases flow control.
    async fn read_to_end(&mut self) -> Result<(), Reason> {
        loop {
            match self.recv.data().await {
                Some(Ok(chunk)) => {
                    let _ = self.recv.flow_control().release_capacity(chunk.len());
                    push(
                        &self.log,
                        Ev::Data {
                            id: self.id,
                            bytes: chunk,
                        },
                    );
                }
                Some(Err(e)) => {
                    let reason = e.reason().unwrap_or(Reason::INTERNAL_ERROR);
                    push(
                        &self.log,
                        Ev::Reset {
                            id: self.id,
                            reason,
                        },
                    );
                    return Err(reason);
                }
                None => {
                    push(&self.log, Ev::End { id: self.id });
                    return Ok(());
                }
            }
        }
    }

    /// Reads DATA until `n` bytes arrived (or the stream ended); logs them.
    async fn read_bytes(&mut self, n: usize) -> Result<(), Reason> {
        let mut got = 0;
        while got < n {
            match self.recv.data().await {
                Some(Ok(chunk)) => {
                    got += chunk.len();
                    let _ = self.recv.flow_control().release_capacity(chunk.len());
                    push(
                        &self.log,
                        Ev::Data {
                            id: self.id,
                            bytes: chunk,
                        },
                    );
                }
                Some(Err(e)) => {
                    let reason = e.reason().unwrap_or(Reason::INTERNAL_ERROR);
                    push(
                        &self.log,
                        Ev::Reset {
                            id: self.id,
                            reason,
                        },
                    );
                    return Err(reason);
                }
                None => {
                    push(&self.log, Ev::End { id: self.id });
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Waits until the client resets the stream, and logs it.
    async fn wait_reset(&mut self) {
        let respond = &mut self.respond;
        if let Ok(reason) = poll_fn(|cx| respond.poll_reset(cx)).await {
            push(
                &self.log,
                Ev::Reset {
                    id: self.id,
                    reason,
                },
            );
        }
    }

    /// Trailers-Only with `grpc-status: code` and extra headers.
    fn trailers_only(&mut self, code: &'static str, extra: &[(&'static str, &'static str)]) {
        let mut r = http::Response::new(());
        let h = r.headers_mut();
        h.insert("content-type", HeaderValue::from_static("application/grpc"));
        h.insert("grpc-status", HeaderValue::from_static(code));
        for (k, v) in extra {
            h.insert(*k, HeaderValue::from_static(v));
        }
        let _ = self.respond.send_response(r, true);
    }

    /// Response headers only; the stream stays open.
    fn headers(&mut self) -> Option<h2::SendStream<Bytes>> {
        let mut r = http::Response::new(());
        r.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/grpc"));
        self.respond.send_response(r, false).ok()
    }

    /// Headers, one message, OK trailers.
    fn ok(&mut self, payload: &[u8]) {
        if let Some(mut s) = self.headers() {
            let _ = s.send_data(frame(payload), false);
            let mut t = HeaderMap::new();
            t.insert("grpc-status", HeaderValue::from_static("0"));
            let _ = s.send_trailers(t);
        }
    }
}

/// A Length-Prefixed-Message.
fn frame(payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + payload.len());
    b.put_u8(0);
    b.put_u32(payload.len() as u32);
    b.extend_from_slice(payload);
    b.freeze()
}

/// Splits a request body into its messages.
fn deframe(mut body: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        assert!(
            body.len() >= 5 + len,
            "truncated message in the request body"
        );
        out.push(body[5..5 + len].to_vec());
        body = &body[5 + len..];
    }
    assert!(body.is_empty(), "trailing bytes in the request body");
    out
}

fn channel_with(addrs: &[SocketAddr], config: &str) -> Channel {
    let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    Channel::builder(format!("ipv4:{}", list.join(",")))
        .default_service_config(config)
        .service_config_lookup(false)
        .build()
        .expect("channel")
}

fn retry_config(max_attempts: u32) -> String {
    format!(
        r#"{{"methodConfig":[{{"name":[{{"service":"{SVC}"}}],"retryPolicy":{{"maxAttempts":{max_attempts},"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}}}]}}"#
    )
}

fn hedging_config(max_attempts: u32, delay: &str) -> String {
    format!(
        r#"{{"loadBalancingConfig":[{{"round_robin":{{}}}}],"methodConfig":[{{"name":[{{"service":"{SVC}"}}],"hedgingPolicy":{{"maxAttempts":{max_attempts},"hedgingDelay":"{delay}","nonFatalStatusCodes":["UNAVAILABLE"]}}}}]}}"#
    )
}

/// Lets loopback I/O happen on the paused clock: many short sleeps instead of one long jump.
async fn settle(total: Duration) {
    let step = Duration::from_millis(5);
    let mut waited = Duration::ZERO;
    while waited < total {
        tokio::time::sleep(step).await;
        waited += step;
    }
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..400 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("never happened: {what}");
}

// ---- : hedging paced by an attempt that cannot move --------------------------------------------------

/// Regression (the failure it guards against): A bidi call with a hedging policy on a server with MAX_CONCURRENT_STREAMS = 1: the hedge waits in
/// h2's local queue (h2 assigns no send capacity to a pending-open stream), so it never "catches up", so the
/// driver never takes the next message, so `send` blocks forever while the original attempt, which is
/// healthy, waits for the rest of the request. The call can only end at its deadline. A6 hedging forwards
/// messages to all attempts, but a stuck hedge must not stall the call (grpc-java paces by the readiest
/// attempt and buffers for the others).
#[tokio::test(start_paused = true)]
async fn a_hedge_queued_locally_does_not_stall_the_sender() {
    fn one_stream(b: &mut h2::server::Builder) {
        b.max_concurrent_streams(1);
    }
    let server = Raw::start(
        one_stream,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_ok() {
                s.ok(b"done");
            }
        }),
    )
    .await;
    let ch = channel_with(&[server.addr], &hedging_config(2, "0.1s"));
    let sent = AtomicUsize::new(0);
    let outcome = tokio::time::timeout(GUARD, async {
        let (mut tx, mut rx) = ch
            .streaming_raw(BIDI, Request::new(()))
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
        deframe(&server.body(1).0)
    );
}

/// Regression (the failure it guards against): (same root cause, more realistic). Two backends; the hedge lands on one that accepts the stream
/// but never reads it (its flow-control window closes). The original backend is healthy and answers once the
/// request is complete, but the sender is paced by the stuck hedge and the call never finishes. Hedging
/// exists to route around a slow backend; here a slow backend stalls the call.
#[tokio::test(start_paused = true)]
async fn a_hedge_on_a_backend_that_never_reads_does_not_stall_the_sender() {
    let good = Raw::start(
        defaults,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_ok() {
                s.ok(b"done");
            }
        }),
    )
    .await;
    let stuck = Raw::start(
        defaults,
        handler(|mut s: Stream| async move {
            s.wait_reset().await;
        }),
    )
    .await;
    let ch = channel_with(&[good.addr, stuck.addr], &hedging_config(2, "0.1s"));
    // Warm both subchannels so round_robin has both READY.
    ch.connect();
    settle(Duration::from_millis(200)).await;
    let outcome = tokio::time::timeout(GUARD, async {
        let (mut tx, mut rx) = ch
            .streaming_raw(BIDI, Request::new(()))
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

// ---- : unbounded buffering while no attempt can take messages ----------------------------------------

/// Regression (the failure it guards against): While a retry backs off there is no attempt, so the driver takes every message the application
/// sends (`all()` over no attempts is true). Past the per-call buffer limit the call switches to
/// "commit on start" and keeps *every* further message in memory (`RetryCall::send_message` pushes to
/// `messages` without bound): `send` never waits, whatever the limits say. `RequestSender::send` promises "a
/// slow server slows the sender instead of filling memory", and the retry buffer limits exist to bound
/// memory. Here a 64 KiB per-call limit lets 16 MiB in during a 60 s pushback with nothing reading. The
/// same hole exists while the (committed) attempt is still picking: `Attempt::caught_up` is true for a
/// picking attempt, so its queue grows without bound too (e.g. a wait-for-ready retry with no backend).
#[tokio::test(start_paused = true)]
async fn messages_sent_during_backoff_are_not_buffered_without_bound() {
    let server = Raw::start(
        defaults,
        handler(|mut s: Stream| async move {
            if s.prev.is_none() {
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
    let ch = Channel::builder(format!("ipv4:{}", server.addr))
        .default_service_config(retry_config(3))
        .service_config_lookup(false)
        .per_rpc_buffer_limit(64 << 10)
        .build()
        .expect("channel");
    let sent = Arc::new(AtomicUsize::new(0));
    let guard = tokio::time::timeout(GUARD, async {
        let (mut tx, _rx) = ch
            .streaming_raw(BIDI, Request::new(()))
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

// ---- : the retry buffer is not freed at commit ------------------------------------------------------

/// Regression (the failure it guards against): A6: "On commit, ... free the buffer". The state machine frees, at commit, only the messages the
/// committed attempt has reported as sent (`release_sent`); the rest are written by `Attempt::take_open` at
/// handover, and after the handover no one reports them to the `RetryCall` that now sits in
/// `Shared::retry` until the call ends. Their bytes stay counted in the channel's buffer pool (and the
/// `Bytes` stay alive in `RetryCall::messages`) for the whole life of the committed call. Here a long-lived
/// bidi call commits while its 250 KiB message is still partly behind flow control: from then on the
/// 300 KiB channel pool has only 50 KiB for everyone, so an unrelated unary call with a 100 KiB request
/// "overflows", commits at once and is never retried.
#[tokio::test(start_paused = true)]
async fn commit_frees_the_unsent_part_of_the_retry_buffer() {
    let server = Raw::start(
        defaults,
        handler(|mut s: Stream| async move {
            if s.path == BIDI {
                // Read one chunk, send the response headers (the client commits), then stop reading.
                if s.read_bytes(1).await.is_ok() {
                    let _send = s.headers();
                    s.wait_reset().await;
                }
                return;
            }
            // Unary: the first attempt fails UNAVAILABLE, a retry succeeds.
            let first = s.prev.is_none();
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
    let ch = Channel::builder(format!("ipv4:{}", server.addr))
        .default_service_config(retry_config(3))
        .service_config_lookup(false)
        .retry_buffer_size(300 << 10)
        .build()
        .expect("channel");
    let outcome = tokio::time::timeout(GUARD, async {
        let (mut tx, mut rx) = ch
            .streaming_raw(BIDI, Request::new(()))
            .await
            .expect("start");
        tx.send(Bytes::from(vec![1u8; 250 << 10]))
            .await
            .expect("send");
        rx.headers().await.expect("the long-lived call committed");
        settle(Duration::from_millis(100)).await;
        // The long-lived call is committed: it can never be replayed, so it should hold no retry buffer.
        let r = ch
            .unary_raw(UNARY, Request::new(Bytes::from(vec![2u8; 100 << 10])))
            .await;
        let attempts = server.opens().len() - 1;
        // Control: once the long-lived call ends (its state machine dropped), the same unary call retries.
        drop((tx, rx));
        settle(Duration::from_millis(100)).await;
        let control = ch
            .unary_raw(UNARY, Request::new(Bytes::from(vec![2u8; 100 << 10])))
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

// ---- : a leaked driver when `streaming()` is abandoned -----------------------------------------------

/// Regression (the failure it guards against): `streaming_with` spawns the driver and then waits for the first attempt to start. If the caller
/// gives up on `streaming()` (a timeout around it, a `select!`), nobody owns the call any more, but the
/// spawned driver goes on: here a wait-for-ready call without a deadline keeps picking, and once the server
/// comes up it opens a stream there that is never cancelled (and its `CallGuard` keeps the channel from ever
/// going idle). Dropping the future must cancel the call.
#[tokio::test(start_paused = true)]
async fn abandoning_streaming_before_it_returns_cancels_the_call() {
    let (held, addr) = support::reserved_port();
    let ch = Channel::new(format!("ipv4:{addr}")).expect("channel");
    let gave_up = tokio::time::timeout(
        Duration::from_secs(2),
        ch.streaming_raw(BIDI, Request::new(()).with_wait_for_ready(true)),
    )
    .await;
    assert!(gave_up.is_err(), "nothing listens yet: streaming() waits");
    // The caller has given up. Now the server comes up.
    drop(held);
    let listener = TcpListener::bind(addr).await.expect("rebind");
    let server = Raw::serve(
        listener,
        defaults,
        handler(|mut s: Stream| async move { s.wait_reset().await }),
    );
    let outcome = tokio::time::timeout(GUARD, async {
        tokio::time::sleep(Duration::from_secs(300)).await;
        settle(Duration::from_millis(200)).await;
    })
    .await;
    assert!(outcome.is_ok());
    let opened = server.opens();
    let reset = server.resets();
    assert!(
        opened.iter().all(|(id, _)| reset.iter().any(|(r, _)| r == id)),
        "an abandoned call opened streams {opened:?} on the server that were never reset ({reset:?})"
    );
}

// ---- : RST_STREAM(NO_ERROR) after an early Trailers-Only ---------------------------------------------

/// Regression (the failure it guards against): (minor, a regression). PROTOCOL-HTTP2: a client that gets the server's END_STREAM before sending its
/// own should send RST_STREAM(NO_ERROR). Before commit the attempt owns the stream: on Trailers-Only it is set
/// to `Done`, dropping every handle, and h2's implicit reset for a client stream is CANCEL. (`end_remotely`
/// still sends NO_ERROR after commit.)
#[tokio::test(start_paused = true)]
async fn early_trailers_only_is_answered_with_rst_no_error() {
    let server = Raw::start(
        defaults,
        handler(|mut s: Stream| async move {
            s.trailers_only("3", &[]);
            let _ = s.read_to_end().await;
        }),
    )
    .await;
    let ch = channel_with(&[server.addr], "{}");
    let outcome = tokio::time::timeout(GUARD, async {
        let (_tx, mut rx) = ch
            .streaming_raw(BIDI, Request::new(()))
            .await
            .expect("start");
        let status = rx.message().await.expect_err("INVALID_ARGUMENT");
        assert_eq!(status.code(), Code::InvalidArgument);
        eventually("the server sees the client's RST_STREAM", || {
            !server.resets().is_empty()
        })
        .await;
        // The sender is still alive: the client never half-closed.
        drop(_tx);
    })
    .await;
    assert!(outcome.is_ok());
    assert_eq!(
        server.resets(),
        vec![(1, Reason::NO_ERROR)],
        "trailers before the client's END_STREAM: RST_STREAM(NO_ERROR)"
    );
}

// ---- : an error that says OK ---------------------------------------------------------------------------

/// Regression (the failure it guards against): (minor). A streaming call whose server answers Trailers-Only OK before commit: the call is OK, but
/// the next `send` returns `Err` carrying that OK status (`hand_over` stores the call's status as `ended`,
/// and `send_frame` returns `ended` as the error). After commit the same situation gives INTERNAL "the call
/// has ended". An `Err(Status)` whose code is OK is not an error a caller can act on.
#[tokio::test(start_paused = true)]
async fn send_after_an_ok_trailers_only_fails_with_a_non_ok_code() {
    let server = Raw::start(
        defaults,
        handler(|mut s: Stream| async move {
            s.trailers_only("0", &[]);
            let _ = s.read_to_end().await;
        }),
    )
    .await;
    let ch = channel_with(&[server.addr], "{}");
    let outcome = tokio::time::timeout(GUARD, async {
        let (mut tx, mut rx) = ch
            .streaming_raw(BIDI, Request::new(()))
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

// ---- : graceful GOAWAY mid-call ----------------------------------------------------------------------

/// After a graceful GOAWAY (A9: 2^31-1, PING, then the real id) the old connection keeps serving its
/// open stream while h2 refuses new ones: a new call does not wait for the old stream to end, it goes out on
/// a new connection (PROTOCOL-HTTP2 §GOAWAY).
#[tokio::test(start_paused = true)]
async fn a_graceful_goaway_does_not_strand_new_calls_while_an_old_stream_lives() {
    let server = Raw::start(
        defaults,
        handler(|mut s: Stream| async move {
            if s.path == HOLD {
                let _ = s.headers();
                s.wait_reset().await;
            } else if s.read_to_end().await.is_ok() {
                s.ok(b"fresh");
            }
        }),
    )
    .await;
    let ch = channel_with(&[server.addr], "{}");
    let outcome = tokio::time::timeout(GUARD, async {
        let (_tx, mut rx) = ch
            .streaming_raw(HOLD, Request::new(()))
            .await
            .expect("start");
        rx.headers().await.expect("held call is up");
        server.goaway.notify_waiters();
        server.goaway.notify_one();
        settle(Duration::from_millis(200)).await;
        let r = tokio::time::timeout(
            Duration::from_secs(30),
            ch.unary_raw(UNARY, Request::new(Bytes::from_static(b"x"))),
        )
        .await;
        drop(rx);
        r
    })
    .await
    .expect("guard");
    let r = outcome
        .expect("a new call after a graceful GOAWAY must not wait for the old stream to end");
    assert_eq!(&r.expect("ok").into_message()[..], b"fresh");
    assert!(server.conns.load(Ordering::SeqCst) >= 2, "a new connection");
}

// ---- : ordering and duplication at the commit handover ----------------------------------------------

/// A hedged bidi call commits to the hedge (it sends response headers after the first message), while
/// the application streams 200 messages as fast as `send` allows. The committed stream gets every message
/// exactly once, in order, then exactly one END_STREAM; the losing original is reset with CANCEL.
#[tokio::test(start_paused = true)]
async fn messages_around_a_hedge_commit_arrive_once_in_order() {
    let server = Raw::start(
        defaults,
        handler(|mut s: Stream| async move {
            if s.prev.is_none() {
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
                let _ = send.send_data(frame(b"done"), false);
                let mut t = HeaderMap::new();
                t.insert("grpc-status", HeaderValue::from_static("0"));
                let _ = send.send_trailers(t);
            }
        }),
    )
    .await;
    let ch = channel_with(&[server.addr], &hedging_config(2, "0.05s"));
    let outcome = tokio::time::timeout(GUARD, async {
        let (mut tx, mut rx) = ch
            .streaming_raw(BIDI, Request::new(()))
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
        .find(|(_, p)| p.as_deref() == Some("1"))
        .map(|(id, _)| *id)
        .expect("a hedge was sent");
    let (body, ends) = server.body(hedge);
    let got: Vec<String> = deframe(&body)
        .into_iter()
        .map(|m| String::from_utf8(m).expect("utf8"))
        .collect();
    let want: Vec<String> = (0..200u32).map(|i| format!("m{i:03}")).collect();
    assert_eq!(
        got, want,
        "every message once, in order, on the committed hedge"
    );
    assert_eq!(ends, 1, "exactly one END_STREAM");
    eventually("the losing original is cancelled", || {
        server.resets().contains(&(1, Reason::CANCEL))
    })
    .await;
}

/// Half-close with no message at all, and dropping the sender instead of finishing, both reach the
/// committed stream as one END_STREAM with an empty body.
#[tokio::test(start_paused = true)]
async fn half_close_without_messages_and_dropped_sender() {
    let server = Raw::start(
        defaults,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_ok() {
                s.ok(b"");
            }
        }),
    )
    .await;
    let ch = channel_with(&[server.addr], &retry_config(3));
    let outcome = tokio::time::timeout(GUARD, async {
        for finish in [true, false] {
            let (tx, mut rx) = ch
                .streaming_raw(BIDI, Request::new(()))
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
        assert_eq!(server.body(id), (Vec::new(), 1), "stream {id}");
    }
}

// ---- : cancellation before commit --------------------------------------------------------------------

/// Dropping the receiving half of an uncommitted hedged call resets every live attempt with CANCEL,
/// and a later `send` fails CANCELLED.
#[tokio::test(start_paused = true)]
async fn dropping_the_receiver_before_commit_cancels_every_attempt() {
    let server = Raw::start(
        defaults,
        handler(|mut s: Stream| async move {
            let _ = s.read_to_end().await;
        }),
    )
    .await;
    let ch = channel_with(&[server.addr], &hedging_config(3, "0.1s"));
    let outcome = tokio::time::timeout(GUARD, async {
        let (mut tx, rx) = ch
            .streaming_raw(BIDI, Request::new(()))
            .await
            .expect("start");
        tx.send(Bytes::from_static(b"a")).await.expect("send");
        settle(Duration::from_millis(350)).await;
        assert_eq!(server.opens().len(), 3, "original and two hedges");
        drop(rx);
        eventually("every attempt reset", || server.resets().len() == 3).await;
        let err = tx
            .send(Bytes::from_static(b"b"))
            .await
            .expect_err("cancelled");
        assert_eq!(err.code(), Code::Cancelled);
    })
    .await;
    assert!(outcome.is_ok(), "{:?}", server.events());
    assert!(server
        .resets()
        .iter()
        .all(|(_, reason)| *reason == Reason::CANCEL));
}

// ---- : deadlines -------------------------------------------------------------------------------------

/// `streaming()` with wait-for-ready and nothing listening waits, but ends at its deadline with
/// DEADLINE_EXCEEDED.
#[tokio::test(start_paused = true)]
async fn streaming_wait_for_ready_ends_at_the_deadline() {
    let (_held, addr) = support::reserved_port();
    let ch = Channel::new(format!("ipv4:{addr}")).expect("channel");
    let start = Instant::now();
    let r = tokio::time::timeout(
        GUARD,
        ch.streaming_raw(
            BIDI,
            Request::new(())
                .with_wait_for_ready(true)
                .with_timeout(Duration::from_secs(5)),
        ),
    )
    .await
    .expect("guard");
    let status = r.expect_err("nothing listens");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_secs(5) && elapsed < Duration::from_millis(5100),
        "{elapsed:?}"
    );
}

/// A timeout too large to add to now (`Duration::MAX`) or merely enormous does not panic, for unary
/// and streaming calls.
#[tokio::test(start_paused = true)]
async fn huge_timeouts_do_not_panic() {
    let server = Raw::start(
        defaults,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_ok() {
                s.ok(b"ok");
            }
        }),
    )
    .await;
    let ch = channel_with(&[server.addr], &retry_config(2));
    let outcome = tokio::time::timeout(GUARD, async {
        for t in [
            Duration::MAX,
            Duration::from_secs(u64::MAX / 2),
            Duration::from_secs(1 << 40),
        ] {
            let r = ch
                .unary_raw(UNARY, Request::new(Bytes::new()).with_timeout(t))
                .await
                .expect("unary");
            assert_eq!(&r.into_message()[..], b"ok");
            let (tx, mut rx) = ch
                .streaming_raw(BIDI, Request::new(()).with_timeout(t))
                .await
                .expect("streaming");
            drop(tx);
            assert!(rx.message().await.expect("reply").is_some());
        }
    })
    .await;
    assert!(outcome.is_ok());
}

// ---- : retry semantics per shape ---------------------------------------------------------------------

/// Server-streaming: response headers and then UNAVAILABLE before any message is committed (headers
/// commit) and not retried.
#[tokio::test(start_paused = true)]
async fn server_streaming_headers_then_failure_is_not_retried() {
    let server = Raw::start(
        defaults,
        handler(|mut s: Stream| async move {
            let _ = s.read_to_end().await;
            if let Some(mut send) = s.headers() {
                let mut t = HeaderMap::new();
                t.insert("grpc-status", HeaderValue::from_static("14"));
                let _ = send.send_trailers(t);
            }
        }),
    )
    .await;
    let ch = channel_with(&[server.addr], &retry_config(5));
    let outcome = tokio::time::timeout(GUARD, async {
        let response = ch
            .server_streaming::<interop_proto::Empty, interop_proto::Empty>(
                BIDI,
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
            .unary_raw(UNARY, Request::new(Bytes::from_static(b"x")))
            .await
            .expect_err("UNAVAILABLE after headers");
        assert_eq!(status.code(), Code::Unavailable);
        settle(Duration::from_secs(2)).await;
        assert_eq!(server.opens().len(), 2, "unary: headers commit, no retry");
    })
    .await;
    assert!(outcome.is_ok());
}

/// A client-streaming call without any policy whose first attempt is refused (REFUSED_STREAM) after
/// the whole request was written is retried once, transparently: every message replayed in order, one
/// END_STREAM, and no `grpc-previous-rpc-attempts`.
#[tokio::test(start_paused = true)]
async fn refused_stream_replays_the_streamed_request_transparently() {
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    let server = Raw::start(
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
    let ch = channel_with(&[server.addr], "{}");
    let outcome = tokio::time::timeout(GUARD, async {
        let (mut tx, mut rx) = ch
            .streaming_raw(BIDI, Request::new(()))
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
        opens[1].1, None,
        "a transparent retry is not a previous attempt"
    );
    let (body, ends) = server.body(opens[1].0);
    let want: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 10]).collect();
    assert_eq!(deframe(&body), want);
    assert_eq!(ends, 1);
}

/// Dropping a unary call's future during a retry backoff ends it: no further attempt is made.
#[tokio::test(start_paused = true)]
async fn dropping_a_unary_call_during_backoff_stops_retrying() {
    let server = Raw::start(
        defaults,
        handler(|mut s: Stream| async move {
            let _ = s.read_to_end().await;
            s.trailers_only("14", &[("grpc-retry-pushback-ms", "5000")]);
        }),
    )
    .await;
    let ch = channel_with(&[server.addr], &retry_config(5));
    let gave_up = tokio::time::timeout(
        Duration::from_secs(1),
        ch.unary_raw(UNARY, Request::new(Bytes::from_static(b"x"))),
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
