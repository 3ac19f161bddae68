//! The A6 call path end to end: throttle accounting (committed attempts, local ends, pushback in trailers),
//! `unix:` and `dns:` targets, the `client_streaming` convenience API, server streaming under hedging,
//! deadlines when every attempt is refused, fail-fast picks under a policy, compression and metadata on
//! every attempt, and many concurrent streaming calls. Real loopback sockets (TCP and Unix), a scriptable
//! raw h2 server, tokio's paused clock. Every test is bounded by a `tokio::time::timeout` guard; the tests
//! about busy loops also have a real-time watchdog (a busy loop never lets the paused clock advance, so the
//! tokio guard would not fire).

mod support;

use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use grpc_channel::{Channel, Code, Encoding, MessageOptions, Request, Status};
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use http::{HeaderMap, HeaderValue};
use interop::faulty::{FlakyItem, FlakyMessage, FlakyTotals};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// Paused-clock guard: far above every timeout here, so it only fires on a hang.
const GUARD: Duration = Duration::from_secs(300);

const SVC: &str = "t.S";

// ---- a scriptable raw h2 server over TCP or a Unix socket -------------------------------------------------

#[derive(Clone, Debug)]
#[allow(dead_code)]
enum Ev {
    Open {
        conn: usize,
        id: u32,
        path: String,
        headers: HeaderMap,
        authority: Option<String>,
    },
    Data {
        conn: usize,
        id: u32,
        bytes: Bytes,
    },
    End {
        conn: usize,
        id: u32,
    },
    Reset {
        conn: usize,
        id: u32,
        reason: Reason,
    },
}

type Log = Arc<Mutex<Vec<Ev>>>;

fn push(log: &Log, ev: Ev) {
    log.lock().expect("log").push(ev);
}

struct Stream {
    conn: usize,
    id: u32,
    path: String,
    headers: HeaderMap,
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
    addr: Option<SocketAddr>,
    path: Option<PathBuf>,
    log: Log,
    goaway: Arc<Notify>,
    kill: Arc<watch::Sender<bool>>,
    conns: Arc<AtomicUsize>,
}

impl Raw {
    fn new(addr: Option<SocketAddr>, path: Option<PathBuf>) -> Raw {
        Raw {
            addr,
            path,
            log: Arc::default(),
            goaway: Arc::new(Notify::new()),
            kill: Arc::new(watch::channel(false).0),
            conns: Arc::default(),
        }
    }

    async fn tcp(configure: fn(&mut h2::server::Builder), h: Handler) -> Raw {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        Raw::serve_tcp(listener, configure, h)
    }

    fn serve_tcp(
        listener: TcpListener,
        configure: fn(&mut h2::server::Builder),
        h: Handler,
    ) -> Raw {
        let raw = Raw::new(Some(listener.local_addr().expect("addr")), None);
        let r = raw.clone();
        let mut kill = raw.kill.subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    a = listener.accept() => match a {
                        Ok((tcp, _)) => {
                            let _ = tcp.set_nodelay(true);
                            let n = r.conns.fetch_add(1, Ordering::SeqCst) + 1;
                            tokio::spawn(r.clone().connection(tcp, n, configure, h.clone()));
                        }
                        Err(_) => return,
                    },
                    _ = kill.changed() => return,
                }
            }
        });
        raw
    }

    fn unix(path: PathBuf, configure: fn(&mut h2::server::Builder), h: Handler) -> Raw {
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).expect("bind unix");
        let raw = Raw::new(None, Some(path));
        let r = raw.clone();
        let mut kill = raw.kill.subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    a = listener.accept() => match a {
                        Ok((io, _)) => {
                            let n = r.conns.fetch_add(1, Ordering::SeqCst) + 1;
                            tokio::spawn(r.clone().connection(io, n, configure, h.clone()));
                        }
                        Err(_) => return,
                    },
                    _ = kill.changed() => return,
                }
            }
        });
        raw
    }

    async fn connection<T>(
        self,
        io: T,
        n: usize,
        configure: fn(&mut h2::server::Builder),
        h: Handler,
    ) where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut kill = self.kill.subscribe();
        let mut b = h2::server::Builder::new();
        configure(&mut b);
        let Ok(mut conn) = b.handshake::<_, Bytes>(io).await else {
            return;
        };
        loop {
            tokio::select! {
                next = conn.accept() => match next {
                    Some(Ok((request, respond))) => {
                        let (parts, recv) = request.into_parts();
                        let id = u32::from(respond.stream_id());
                        let path = parts.uri.path().to_owned();
                        push(&self.log, Ev::Open {
                            conn: n,
                            id,
                            path: path.clone(),
                            headers: parts.headers.clone(),
                            authority: parts.uri.authority().map(ToString::to_string),
                        });
                        let s = Stream { conn: n, id, path, headers: parts.headers, recv, respond, log: self.log.clone() };
                        tokio::spawn(h(s));
                    }
                    _ => return,
                },
                () = self.goaway.notified() => conn.graceful_shutdown(),
                _ = kill.changed() => return,
            }
        }
    }

    /// Stops listening and drops every connection (the socket closes).
    fn kill(&self) {
        let _ = self.kill.send(true);
    }

    fn target(&self) -> String {
        match (&self.addr, &self.path) {
            (Some(a), _) => format!("ipv4:{a}"),
            (None, Some(p)) => format!("unix:{}", p.display()),
            _ => unreachable!(),
        }
    }

    fn events(&self) -> Vec<Ev> {
        self.log.lock().expect("log").clone()
    }

    /// (conn, id, path, headers) of every stream opened.
    fn opens(&self) -> Vec<(usize, u32, String, HeaderMap, Option<String>)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Ev::Open {
                    conn,
                    id,
                    path,
                    headers,
                    authority,
                } => Some((conn, id, path, headers, authority)),
                _ => None,
            })
            .collect()
    }

    fn opens_of(&self, path: &str) -> usize {
        self.opens().iter().filter(|o| o.2 == path).count()
    }

    fn resets(&self) -> Vec<(usize, u32, Reason)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Ev::Reset { conn, id, reason } => Some((conn, id, reason)),
                _ => None,
            })
            .collect()
    }

    fn body(&self, conn: usize, id: u32) -> Vec<u8> {
        let mut body = Vec::new();
        for e in self.events() {
            if let Ev::Data {
                conn: c,
                id: i,
                bytes,
            } = e
            {
                if c == conn && i == id {
                    body.extend_from_slice(&bytes);
                }
            }
        }
        body
    }
}

fn defaults(_: &mut h2::server::Builder) {}

impl Stream {
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    fn prev(&self) -> u32 {
        self.header("grpc-previous-rpc-attempts")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    fn log_err(&self, e: &h2::Error) -> Reason {
        let reason = e.reason().unwrap_or(Reason::INTERNAL_ERROR);
        push(
            &self.log,
            Ev::Reset {
                conn: self.conn,
                id: self.id,
                reason,
            },
        );
        reason
    }

    /// Reads DATA until END_STREAM (Ok) or a reset (Err), logging both.
    async fn read_to_end(&mut self) -> Result<(), Reason> {
        loop {
            match self.recv.data().await {
                Some(Ok(chunk)) => {
                    let _ = self.recv.flow_control().release_capacity(chunk.len());
                    push(
                        &self.log,
                        Ev::Data {
                            conn: self.conn,
                            id: self.id,
                            bytes: chunk,
                        },
                    );
                }
                Some(Err(e)) => return Err(self.log_err(&e)),
                None => {
                    push(
                        &self.log,
                        Ev::End {
                            conn: self.conn,
                            id: self.id,
                        },
                    );
                    return Ok(());
                }
            }
        }
    }

    /// Reads until `n` bytes arrived (or the stream ended).
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
                            conn: self.conn,
                            id: self.id,
                            bytes: chunk,
                        },
                    );
                }
                Some(Err(e)) => return Err(self.log_err(&e)),
                None => {
                    push(
                        &self.log,
                        Ev::End {
                            conn: self.conn,
                            id: self.id,
                        },
                    );
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    async fn wait_reset(&mut self) {
        let respond = &mut self.respond;
        if let Ok(reason) = poll_fn(|cx| respond.poll_reset(cx)).await {
            push(
                &self.log,
                Ev::Reset {
                    conn: self.conn,
                    id: self.id,
                    reason,
                },
            );
        }
    }

    fn trailers_only(&mut self, code: &str, extra: &[(&str, &str)]) {
        let mut r = http::Response::new(());
        let h = r.headers_mut();
        h.insert("content-type", HeaderValue::from_static("application/grpc"));
        h.insert("grpc-status", HeaderValue::from_str(code).expect("code"));
        for (k, v) in extra {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        let _ = self.respond.send_response(r, true);
    }

    fn headers(&mut self) -> Option<h2::SendStream<Bytes>> {
        let mut r = http::Response::new(());
        r.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/grpc"));
        self.respond.send_response(r, false).ok()
    }

    fn ok(&mut self, payload: &[u8]) {
        if let Some(mut s) = self.headers() {
            let _ = s.send_data(frame(payload), false);
            let _ = s.send_trailers(trailers("0", &[]));
        }
    }
}

fn trailers(code: &str, extra: &[(&str, &str)]) -> HeaderMap {
    let mut t = HeaderMap::new();
    t.insert("grpc-status", HeaderValue::from_str(code).expect("code"));
    for (k, v) in extra {
        t.insert(
            http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
            HeaderValue::from_str(v).expect("value"),
        );
    }
    t
}

fn frame(payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + payload.len());
    b.put_u8(0);
    b.put_u32(payload.len() as u32);
    b.extend_from_slice(payload);
    b.freeze()
}

/// (compressed flag, payload) of every Length-Prefixed-Message in a request body.
fn deframe(mut body: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        assert!(body.len() >= 5 + len, "truncated message");
        out.push((body[0], body[5..5 + len].to_vec()));
        body = &body[5 + len..];
    }
    assert!(body.is_empty(), "trailing bytes");
    out
}

fn channel(target: &str, config: &str) -> Channel {
    Channel::builder(target)
        .default_service_config(config)
        .service_config_lookup(false)
        .build()
        .expect("channel")
}

fn retry_config(max_attempts: u32, initial: &str, codes: &[&str]) -> String {
    let codes: Vec<String> = codes.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        r#"{{"methodConfig":[{{"name":[{{"service":"{SVC}"}}],"retryPolicy":{{"maxAttempts":{max_attempts},"initialBackoff":"{initial}","maxBackoff":"10s","backoffMultiplier":2,"retryableStatusCodes":[{}]}}}}]}}"#,
        codes.join(",")
    )
}

fn hedging_config(max_attempts: u32, delay: &str) -> String {
    format!(
        r#"{{"methodConfig":[{{"name":[{{"service":"{SVC}"}}],"hedgingPolicy":{{"maxAttempts":{max_attempts},"hedgingDelay":"{delay}","nonFatalStatusCodes":["UNAVAILABLE"]}}}}]}}"#
    )
}

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

async fn guarded<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(GUARD, f).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: no result within {GUARD:?} of paused time (hang)"),
    }
}

/// A real-time watchdog: a busy loop keeps the paused clock from advancing, so only real time can stop it.
struct Watchdog(Arc<AtomicBool>);

fn watchdog(what: &'static str, secs: u64) -> Watchdog {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        let until = std::time::Instant::now() + Duration::from_secs(secs);
        while std::time::Instant::now() < until {
            if d.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("watchdog: {what} still running after {secs} s of real time (busy loop?)");
        std::process::exit(101);
    });
    Watchdog(done)
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn socket_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("review2-{}-{name}.sock", std::process::id()))
}

// ---- throttle accounting over the network -----------------------------------------------------------------
//
// maxTokens 3 (3000 milli-tokens, threshold 1500), tokenRatio 0.5. The probe is a unary call whose first
// attempt fails UNAVAILABLE (retryable) and whose second succeeds: its own failure costs one token, so it is
// retried only if the bucket held more than 2.5 tokens before it, i.e. was full. A probe that is retried
// proves nothing was charged; one that is not proves at least one token was.

const PROBE: &str = "/t.S/Probe";
/// Headers, then (after `x-messages` messages, default 0) trailers with `x-code` and optional `x-pushback`.
const HEADERS_THEN: &str = "/t.S/HeadersThen";
/// Headers (and one message), then waits until the client resets the stream.
const HEADERS_HANG: &str = "/t.S/HeadersHang";
/// Never answers: waits for the client's reset.
const SILENT: &str = "/t.S/Silent";
/// Trailers-Only RESOURCE_EXHAUSTED with `grpc-retry-pushback-ms: -1`.
const PUSHBACK: &str = "/t.S/Pushback";

fn throttled_config(codes: &[&str]) -> String {
    let codes: Vec<String> = codes.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        r#"{{"retryThrottling":{{"maxTokens":3,"tokenRatio":0.5}},"methodConfig":[{{"name":[{{"service":"{SVC}"}}],"retryPolicy":{{"maxAttempts":2,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[{}]}}}}]}}"#,
        codes.join(",")
    )
}

async fn throttle_server() -> Raw {
    let probes: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    Raw::tcp(
        defaults,
        handler(move |mut s: Stream| {
            let probes = probes.clone();
            async move {
                match s.path.as_str() {
                    PROBE => {
                        let key = s.header("x-key").unwrap_or_default();
                        let n = {
                            let mut p = probes.lock().expect("probes");
                            let n = p.entry(key).or_default();
                            *n += 1;
                            *n
                        };
                        if s.read_to_end().await.is_err() {
                            return;
                        }
                        if n == 1 {
                            s.trailers_only("14", &[]);
                        } else {
                            s.ok(b"probe");
                        }
                    }
                    HEADERS_THEN => {
                        let code = s.header("x-code").unwrap_or_else(|| "0".into());
                        let pushback = s.header("x-pushback");
                        let messages: usize = s
                            .header("x-messages")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        if s.read_to_end().await.is_err() {
                            return;
                        }
                        if let Some(mut out) = s.headers() {
                            for i in 0..messages {
                                let _ = out.send_data(frame(&[i as u8]), false);
                            }
                            let extra: Vec<(&str, &str)> = pushback
                                .as_deref()
                                .map(|p| vec![("grpc-retry-pushback-ms", p)])
                                .unwrap_or_default();
                            let _ = out.send_trailers(trailers(&code, &extra));
                        }
                    }
                    PUSHBACK => {
                        if s.read_to_end().await.is_ok() {
                            s.trailers_only("8", &[("grpc-retry-pushback-ms", "-1")]);
                        }
                    }
                    HEADERS_HANG => {
                        if let Some(mut out) = s.headers() {
                            let _ = out.send_data(frame(b"first"), false);
                            // After the response headers, only the SendStream can wait for the reset.
                            if let Ok(reason) = poll_fn(|cx| out.poll_reset(cx)).await {
                                push(
                                    &s.log,
                                    Ev::Reset {
                                        conn: s.conn,
                                        id: s.id,
                                        reason,
                                    },
                                );
                            }
                        }
                    }
                    _ => s.wait_reset().await,
                }
            }
        }),
    )
    .await
}

/// Runs the probe: `true` if it was retried (the bucket was full before it).
async fn probe(ch: &Channel, server: &Raw, key: &str) -> bool {
    let before = server.opens_of(PROBE);
    let mut req = Request::new(Bytes::new()).with_timeout(Duration::from_secs(30));
    req.metadata_mut().append("x-key", key).expect("md");
    let result = guarded("probe", ch.unary_raw(PROBE, req)).await;
    let streams = server.opens_of(PROBE) - before;
    match result {
        Ok(_) => {
            assert_eq!(streams, 2, "a successful probe was retried once");
            true
        }
        Err(status) => {
            assert_eq!(status.code(), Code::Unavailable, "{status:?}");
            assert_eq!(streams, 1, "a failed probe was not retried");
            false
        }
    }
}

fn with_headers<T>(mut req: Request<T>, pairs: &[(&str, &str)]) -> Request<T> {
    for (k, v) in pairs {
        req.metadata_mut().append(k, v).expect("md");
    }
    req
}

/// The probe's premise: on a full bucket it is retried.
#[tokio::test(start_paused = true)]
async fn throttle_probe_is_retried_on_a_full_bucket() {
    let server = throttle_server().await;
    let ch = channel(&server.target(), &throttled_config(&["UNAVAILABLE"]));
    assert!(probe(&ch, &server, "p").await);
}

/// A committed attempt (response headers arrived) that then fails with a retryable code costs a token, and
/// is not retried; two committed successes (unary and a bidi stream) give back 2 × tokenRatio.
#[tokio::test(start_paused = true)]
async fn throttle_committed_failure_costs_a_token_and_committed_successes_refill() {
    let server = throttle_server().await;
    let ch = channel(&server.target(), &throttled_config(&["UNAVAILABLE"]));
    let status = guarded(
        "committed failure",
        ch.unary_raw(
            HEADERS_THEN,
            with_headers(Request::new(Bytes::new()), &[("x-code", "14")]),
        ),
    )
    .await
    .expect_err("UNAVAILABLE after headers");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(server.opens_of(HEADERS_THEN), 1, "committed: not retried");

    // Two successes after commit: 2000 + 500 + 500 = 3000 (full again).
    let ok = guarded(
        "committed unary success",
        ch.unary_raw(
            HEADERS_THEN,
            with_headers(Request::new(Bytes::new()), &[("x-messages", "1")]),
        ),
    )
    .await
    .expect("ok");
    assert_eq!(&ok.message()[..], &[0]);
    guarded("committed bidi success", async {
        let (mut tx, mut rx) = ch
            .streaming_raw(
                HEADERS_THEN,
                with_headers(Request::new(()), &[("x-messages", "3")]),
            )
            .await
            .expect("start");
        tx.send(Bytes::from_static(b"x")).await.expect("send");
        tx.finish().await.expect("finish");
        for i in 0..3u8 {
            assert_eq!(&rx.message().await.expect("msg").expect("some")[..], &[i]);
        }
        assert!(rx.message().await.expect("OK").is_none());
    })
    .await;
    assert!(
        probe(&ch, &server, "after-refill").await,
        "the committed successes refilled the bucket"
    );

    // And the failure alone (on a fresh channel) leaves the probe unretried.
    let ch = channel(&server.target(), &throttled_config(&["UNAVAILABLE"]));
    let _ = guarded(
        "committed failure",
        ch.unary_raw(
            HEADERS_THEN,
            with_headers(Request::new(Bytes::new()), &[("x-code", "14")]),
        ),
    )
    .await;
    assert!(
        !probe(&ch, &server, "after-failure").await,
        "a committed UNAVAILABLE cost a token"
    );
}

/// Calls abandoned mid-way (a committed stream dropped, a unary call dropped while it waits, a stream dropped
/// before commit) and a cancel whose code is not retryable cost nothing.
#[tokio::test(start_paused = true)]
async fn throttle_abandoned_calls_cost_nothing() {
    let server = throttle_server().await;
    let ch = channel(&server.target(), &throttled_config(&["UNAVAILABLE"]));
    guarded("abandon", async {
        // Committed, then dropped.
        let (_tx, mut rx) = ch
            .streaming_raw(HEADERS_HANG, Request::new(()))
            .await
            .expect("start");
        rx.headers().await.expect("headers");
        drop(rx);
        // Committed, then cancelled (CANCELLED is not retryable here).
        let (_tx, mut rx) = ch
            .streaming_raw(HEADERS_HANG, Request::new(()))
            .await
            .expect("start");
        rx.headers().await.expect("headers");
        rx.cancel();
        // Not committed, dropped.
        let (tx, rx) = ch
            .streaming_raw(SILENT, Request::new(()))
            .await
            .expect("start");
        settle(Duration::from_millis(50)).await;
        drop((tx, rx));
        // A unary call dropped while the server is silent.
        let _ = tokio::time::timeout(
            Duration::from_millis(200),
            ch.unary_raw(SILENT, Request::new(Bytes::new())),
        )
        .await;
    })
    .await;
    settle(Duration::from_millis(100)).await;
    assert!(probe(&ch, &server, "p").await, "nothing was charged");
}

/// A deadline that passes before commit is the client's own: no token (the state machine's `Local` end).
#[tokio::test(start_paused = true)]
async fn throttle_client_deadline_before_commit_costs_nothing() {
    let server = throttle_server().await;
    let ch = channel(
        &server.target(),
        &throttled_config(&["UNAVAILABLE", "DEADLINE_EXCEEDED"]),
    );
    let status = guarded(
        "silent",
        ch.unary_raw(
            SILENT,
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(1)),
        ),
    )
    .await
    .expect_err("deadline");
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert!(probe(&ch, &server, "p").await, "nothing was charged");
}

/// Regression (the failure it guards against): the same client-side deadline, once the call has committed (the server sent response headers),
/// costs a token when DEADLINE_EXCEEDED is in retryableStatusCodes. The server never failed the call: the
/// client gave up. `Streaming::end_locally` (call.rs) calls `Shared::report_end`, which reports every
/// local end to the state machine as `AttemptEnd::status(code, ..)`, i.e. `FailurePlace::Processed`, so
/// `RetryCall::account` charges it. Before commit the same deadline is `Outcome::Local` and charges nothing
/// (test above); grpc-java and grpc-go never charge a client deadline or cancel.
#[tokio::test(start_paused = true)]
async fn throttle_client_deadline_after_commit_costs_nothing() {
    let server = throttle_server().await;
    let ch = channel(
        &server.target(),
        &throttled_config(&["UNAVAILABLE", "DEADLINE_EXCEEDED"]),
    );
    let status = guarded(
        "headers then silence",
        ch.unary_raw(
            HEADERS_HANG,
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(1)),
        ),
    )
    .await
    .expect_err("deadline");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        probe(&ch, &server, "p").await,
        "the client's own deadline after commit cost a throttle token (the probe was not retried)"
    );
}

/// Regression (the failure it guards against): `Streaming::cancel()` after commit costs a token when CANCELLED is in retryableStatusCodes, though
/// dropping the same call costs nothing. Same root cause: `end_locally` → `report_end` → Processed.
#[tokio::test(start_paused = true)]
async fn throttle_client_cancel_after_commit_costs_nothing() {
    let server = throttle_server().await;
    let ch = channel(
        &server.target(),
        &throttled_config(&["UNAVAILABLE", "CANCELLED"]),
    );
    guarded("cancel", async {
        let (_tx, mut rx) = ch
            .streaming_raw(HEADERS_HANG, Request::new(()))
            .await
            .expect("start");
        rx.headers().await.expect("headers");
        rx.cancel();
        let status = rx.message().await.expect_err("cancelled");
        assert_eq!(status.code(), Code::Cancelled);
    })
    .await;
    settle(Duration::from_millis(50)).await;
    assert_eq!(
        server.resets().iter().map(|r| r.2).collect::<Vec<_>>(),
        vec![Reason::CANCEL],
        "the client cancelled (the server did not fail the call)"
    );
    assert!(
        probe(&ch, &server, "p").await,
        "the application's cancel after commit cost a throttle token (the probe was not retried)"
    );
}

/// A "don't retry" pushback in Trailers-Only (before commit) with a non-retryable code costs a token (A6).
#[tokio::test(start_paused = true)]
async fn throttle_dont_retry_pushback_before_commit_counts() {
    let server = throttle_server().await;
    let ch = channel(&server.target(), &throttled_config(&["UNAVAILABLE"]));
    let status = guarded(
        "pushback",
        ch.unary_raw(PUSHBACK, Request::new(Bytes::new())),
    )
    .await
    .expect_err("RESOURCE_EXHAUSTED");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        !probe(&ch, &server, "p").await,
        "the don't-retry pushback cost a token"
    );
}

/// Regression (the failure it guards against): a "don't retry" pushback (`grpc-retry-pushback-ms: -1`) in the trailers of a *committed* attempt is
/// never seen, so it costs no token (the crate's own rule: a don't-retry pushback qualifies, "fatal code or
/// not; the committed attempt's end counts too"; before commit it does count). `Shared::report_end`
/// (call.rs) reads the pushback from `status.metadata()`, but `MetadataMap::from_headers` (metadata.rs
/// `is_protocol_header`) strips every `grpc-*` key, so the pushback is always `Pushback::None`.
#[tokio::test(start_paused = true)]
async fn throttle_dont_retry_pushback_after_commit_counts() {
    let server = throttle_server().await;
    let ch = channel(&server.target(), &throttled_config(&["UNAVAILABLE"]));
    let status = guarded(
        "pushback after headers",
        ch.unary_raw(
            HEADERS_THEN,
            with_headers(
                Request::new(Bytes::new()),
                &[("x-code", "8"), ("x-pushback", "-1"), ("x-messages", "1")],
            ),
        ),
    )
    .await
    .expect_err("RESOURCE_EXHAUSTED");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        !probe(&ch, &server, "p").await,
        "a don't-retry pushback after commit cost no token (the probe was retried)"
    );
}

// ---- client_streaming convenience API ---------------------------------------------------------------------

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

/// A `Stream` over an iterator.
struct IterStream<I>(I);

impl<I: Iterator + Unpin> futures_core::Stream for IterStream<I> {
    type Item = I::Item;
    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<I::Item>> {
        Poll::Ready(self.0.next())
    }
}

fn msg(n: usize) -> FlakyMessage {
    FlakyMessage {
        payload: Bytes::from(vec![7; n]),
    }
}

/// Regression (the failure it guards against): `Channel::client_streaming` with a timeout hangs past its deadline while the request stream has no
/// next item: it awaits `messages.next()` with nothing racing it (channel.rs `client_streaming`, the `while let
/// Some(msg) = poll_fn(..poll_next..)` loop), and `single_response` (which enforces the deadline) is reached
/// only after the request stream ends. The retry driver does end the call at the deadline, but nobody looks.
#[tokio::test(start_paused = true)]
async fn client_streaming_ends_at_its_deadline_while_the_request_stream_waits() {
    let server = Raw::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            let _ = s.read_to_end().await;
        }),
    )
    .await;
    let ch = channel(&server.target(), &retry_config(3, "0.1s", &["UNAVAILABLE"]));
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

/// Regression (the failure it guards against): the server fails the call early (Trailers-Only INVALID_ARGUMENT after the first message), while the
/// application's request stream has nothing more yet: `client_streaming` never returns the status (same loop).
#[tokio::test(start_paused = true)]
async fn client_streaming_returns_an_early_server_failure_while_the_request_stream_waits() {
    let server = Raw::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            if s.read_bytes(5 + 12).await.is_ok() {
                s.trailers_only("3", &[("grpc-message", "bad first message")]);
            }
        }),
    )
    .await;
    let ch = channel(&server.target(), &retry_config(3, "0.1s", &["UNAVAILABLE"]));
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

/// `client_streaming` with a finite stream under retries: an early Trailers-Only UNAVAILABLE (after the first
/// message, before the client finished) is retried with every message replayed; an early non-retryable code
/// ends the call with that code, without a hang.
#[tokio::test(start_paused = true)]
async fn client_streaming_early_failure_is_retried_or_returned() {
    let server = Raw::tcp(
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
    let ch = channel(&server.target(), &retry_config(3, "0.1s", &["UNAVAILABLE"]));
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
    let (conn, id) = (opens[1].0, opens[1].1);
    assert_eq!(
        deframe(&server.body(conn, id)).len(),
        50,
        "every message replayed"
    );
    let status = guarded(
        "fatal",
        ch.client_streaming::<FlakyMessage, FlakyTotals, _>(
            "/t.S/ClientStream",
            with_headers(
                Request::new(IterStream(items.into_iter())),
                &[("x-code", "3")],
            ),
        ),
    )
    .await
    .expect_err("INVALID_ARGUMENT");
    assert_eq!(status.code(), Code::InvalidArgument);
}

/// The same server before commit (Trailers-Only while the request is still being written): the driver
/// notices, the sender is released, the status is the server's, RST_STREAM(NO_ERROR) is sent.
#[tokio::test(start_paused = true)]
async fn trailers_only_while_the_sender_is_blocked_before_commit() {
    let server = Raw::tcp(
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
    let ch = channel(&server.target(), &retry_config(3, "0.1s", &["UNAVAILABLE"]));
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

// ---- server streaming --------------------------------------------------------------------------------------

/// A hedge wins (its headers commit the call, the original is cancelled), streams messages, then fails
/// UNAVAILABLE (non-fatal) mid-stream: the messages arrive whole and in order, the failure is the call's
/// status, and no further hedge starts.
#[tokio::test(start_paused = true)]
async fn server_streaming_hedge_wins_then_fails_mid_stream_is_not_retried() {
    let server = Raw::tcp(
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
                    let _ = out.send_data(frame(&payload), false);
                }
                settle(Duration::from_millis(20)).await;
                let _ = out.send_trailers(trailers("14", &[]));
            }
        }),
    )
    .await;
    let ch = channel(&server.target(), &hedging_config(3, "0.1s"));
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
        server.opens().iter().map(|o| o.1).collect::<Vec<_>>()
    );
    assert!(
        server.resets().iter().any(|r| r.2 == Reason::CANCEL),
        "the losing original was cancelled: {:?}",
        server.resets()
    );
}

// ---- deadlines when every attempt is refused --------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Shape {
    Unary,
    ServerStream,
    ClientStream,
    Bidi,
}

const SHAPES: [Shape; 4] = [
    Shape::Unary,
    Shape::ServerStream,
    Shape::ClientStream,
    Shape::Bidi,
];

/// One call of `shape` with `timeout`: its final status (OK or not).
async fn call_shape(ch: &Channel, shape: Shape, path: &str, timeout: Duration) -> Status {
    let ok = || Status::new(Code::Ok, "");
    match shape {
        Shape::Unary => match ch
            .unary_raw(
                path,
                Request::new(Bytes::from_static(b"u")).with_timeout(timeout),
            )
            .await
        {
            Ok(_) => ok(),
            Err(s) => s,
        },
        Shape::ServerStream => {
            match ch
                .server_streaming::<FlakyMessage, FlakyItem>(
                    path,
                    Request::new(msg(3)).with_timeout(timeout),
                )
                .await
            {
                Err(s) => s,
                Ok(r) => {
                    let (_, mut rx) = r.into_parts();
                    loop {
                        match rx.message().await {
                            Ok(Some(_)) => {}
                            Ok(None) => break ok(),
                            Err(s) => break s,
                        }
                    }
                }
            }
        }
        Shape::ClientStream => match ch
            .client_streaming::<FlakyMessage, FlakyTotals, _>(
                path,
                Request::new(IterStream(vec![msg(3), msg(4)].into_iter())).with_timeout(timeout),
            )
            .await
        {
            Ok(_) => ok(),
            Err(s) => s,
        },
        Shape::Bidi => {
            let (mut tx, mut rx) = match ch
                .streaming_raw(path, Request::new(()).with_timeout(timeout))
                .await
            {
                Ok(halves) => halves,
                Err(s) => return s,
            };
            let _ = tx.send(Bytes::from_static(b"b")).await;
            let _ = tx.finish().await;
            loop {
                match rx.message().await {
                    Ok(Some(_)) => {}
                    Ok(None) => break ok(),
                    Err(s) => break s,
                }
            }
        }
    }
}

/// Every attempt is refused (RST_STREAM(REFUSED_STREAM)): one transparent retry, then the policy (backoff
/// ~1 s, ~2 s), then the deadline (2.5 s) stops it. Every shape ends UNAVAILABLE before the deadline, with a
/// handful of streams (no busy loop: the paused clock advanced through the backoffs).
#[tokio::test(start_paused = true)]
async fn refused_on_every_attempt_ends_by_the_deadline_for_every_shape() {
    let _dog = watchdog("refused on every attempt", 120);
    let server = Raw::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            s.respond.send_reset(Reason::REFUSED_STREAM);
        }),
    )
    .await;
    let ch = channel(&server.target(), &retry_config(5, "1s", &["UNAVAILABLE"]));
    for shape in SHAPES {
        let before = server.opens().len();
        let start = Instant::now();
        let status = guarded(
            "refused",
            call_shape(&ch, shape, "/t.S/Refused", Duration::from_millis(2500)),
        )
        .await;
        let elapsed = start.elapsed();
        let streams = server.opens().len() - before;
        assert_eq!(status.code(), Code::Unavailable, "{shape:?}: {status:?}");
        assert!(
            elapsed >= Duration::from_millis(800) && elapsed <= Duration::from_millis(2500),
            "{shape:?}: ended after {elapsed:?}"
        );
        assert!(
            (3..=5).contains(&streams),
            "{shape:?}: {streams} streams (transparent + policy retries)"
        );
    }
}

/// The server allows no stream at all (SETTINGS_MAX_CONCURRENT_STREAMS = 0): every attempt waits in h2's
/// local queue. Every shape ends DEADLINE_EXCEEDED at its deadline, and the clock advanced (no busy loop).
#[tokio::test(start_paused = true)]
async fn no_stream_slot_ends_at_the_deadline_for_every_shape() {
    let _dog = watchdog("no stream slot", 120);
    fn zero(b: &mut h2::server::Builder) {
        b.max_concurrent_streams(0);
    }
    let server = Raw::tcp(zero, handler(|_s: Stream| async move {})).await;
    let ch = channel(&server.target(), &retry_config(5, "0.1s", &["UNAVAILABLE"]));
    for shape in SHAPES {
        let start = Instant::now();
        let status = guarded(
            "queued",
            call_shape(&ch, shape, "/t.S/Queued", Duration::from_secs(2)),
        )
        .await;
        let elapsed = start.elapsed();
        assert_eq!(
            status.code(),
            Code::DeadlineExceeded,
            "{shape:?}: {status:?}"
        );
        assert!(
            elapsed >= Duration::from_secs(2) && elapsed < Duration::from_millis(2100),
            "{shape:?}: {elapsed:?}"
        );
    }
    assert!(server.opens().is_empty());
}

// ---- fail-fast picks under a retry policy ------------------------------------------------------------------

/// A fail-fast call to a backend that refuses connections: the failed pick is UNAVAILABLE and goes to the
/// policy (A6); the backend comes up during the backoff and a retry succeeds (its `grpc-previous-rpc-attempts`
/// counts the failed pick). Without a policy the call fails at once.
#[tokio::test(start_paused = true)]
async fn fail_fast_pick_failure_goes_to_the_retry_policy() {
    let (socket, addr) = support::reserved_port();
    let ch = channel(
        &format!("ipv4:{addr}"),
        &retry_config(5, "1s", &["UNAVAILABLE"]),
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
    let server = Raw::serve_tcp(
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
    let prev = opens[0].3.get("grpc-previous-rpc-attempts").cloned();
    assert!(
        prev.is_some(),
        "the failed pick was a policy attempt: {prev:?}"
    );
}

// ---- compression, metadata and :authority on every attempt -------------------------------------------------

/// A gzip bidi call with per-message compression off for one message, metadata (repeated ASCII and -bin), a
/// custom `:authority`; the first attempt fails after reading everything, the retry replays it: every
/// attempt carries the same headers and byte-identical messages with the same compressed flags.
#[tokio::test(start_paused = true)]
async fn compression_metadata_and_authority_on_every_attempt() {
    let server = Raw::tcp(
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
        .default_service_config(retry_config(3, "0.1s", &["UNAVAILABLE"]))
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
            MessageOptions { compress: false },
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
        .map(|o| deframe(&server.body(o.0, o.1)))
        .collect();
    assert_eq!(bodies[0], bodies[1], "the replay is byte-identical");
    let flags: Vec<u8> = bodies[1].iter().map(|m| m.0).collect();
    assert_eq!(flags, vec![1, 0, 1]);
    for (_, _, _, h, authority) in &opens {
        assert_eq!(authority.as_deref(), Some("svc.example:8443"));
        assert_eq!(
            h.get("grpc-encoding").map(|v| v.as_bytes()),
            Some(&b"gzip"[..])
        );
        let md: Vec<&[u8]> = h.get_all("x-md").iter().map(|v| v.as_bytes()).collect();
        assert_eq!(md, vec![&b"one"[..], &b"two"[..]]);
        assert!(h.get("x-blob-bin").is_some());
        assert_eq!(h.get("x-blob-bin"), opens[0].3.get("x-blob-bin"));
        assert_eq!(h.get("te").map(|v| v.as_bytes()), Some(&b"trailers"[..]));
    }
}

// ---- unix: targets -----------------------------------------------------------------------------------------

/// Hedging on a `unix:` target: every hedge goes on the one connection; a non-fatal failure sends the next at
/// once; the winner's commit cancels the hung original.
#[tokio::test(start_paused = true)]
async fn unix_hedging_uses_the_one_connection() {
    let path = socket_path("hedging");
    let server = Raw::unix(
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
    let ch = channel(&server.target(), &hedging_config(3, "0.2s"));
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
    assert!(opens.iter().all(|o| o.0 == 1), "one connection");
    eventually("the original is cancelled", || {
        server.resets().iter().any(|r| r.2 == Reason::CANCEL)
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
    let ch = channel(&target, &retry_config(4, "1s", &["UNAVAILABLE"]));
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
    let server = Raw::unix(
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
        .map(|o| o.3.get("grpc-previous-rpc-attempts").cloned())
        .collect();
    assert!(prevs.iter().any(Option::is_some), "{prevs:?}");
    let _ = std::fs::remove_file(&path);
}

/// The server on a `unix:` path goes away and a new one starts on the same path: the next call (no policy)
/// reaches the new server on a new connection, for every shape.
#[tokio::test(start_paused = true)]
async fn unix_server_restart_on_the_same_path() {
    let path = socket_path("restart");
    let h = || {
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_ok() {
                let item = prost::Message::encode_to_vec(&FlakyItem::default());
                s.ok(&item);
            }
        })
    };
    let first = Raw::unix(path.clone(), defaults, h());
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
    let second = Raw::unix(path.clone(), defaults, h());
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
    let first = Raw::unix(path.clone(), defaults, h());
    let ch = channel(&first.target(), &retry_config(3, "0.1s", &["UNAVAILABLE"]));
    guarded("first", ch.unary_raw("/t.S/Ok", Request::new(Bytes::new())))
        .await
        .expect("first");
    first.kill();
    tokio::task::yield_now().await;
    let second = Raw::unix(path.clone(), defaults, h());
    let r = guarded(
        "right after",
        ch.unary_raw("/t.S/Ok", Request::new(Bytes::new())),
    )
    .await;
    let _ = std::fs::remove_file(&path);
    r.expect("a call right after the restart, retried by the policy");
    assert_eq!(second.opens().len(), 1);
}

/// GOAWAY on a `unix:` connection while a stream is still open: new calls go on a new connection at once;
/// the old stream completes.
#[tokio::test(start_paused = true)]
async fn unix_goaway_then_a_new_connection() {
    let path = socket_path("goaway");
    let release = Arc::new(Notify::new());
    let rel = release.clone();
    let server = Raw::unix(
        path.clone(),
        defaults,
        handler(move |mut s: Stream| {
            let rel = rel.clone();
            async move {
                if s.read_to_end().await.is_err() {
                    return;
                }
                if s.path == "/t.S/Hold" {
                    rel.notified().await;
                }
                s.ok(b"ok");
            }
        }),
    );
    let ch = channel(&server.target(), &retry_config(3, "0.1s", &["UNAVAILABLE"]));
    let held = tokio::spawn({
        let ch = ch.clone();
        async move { ch.unary_raw("/t.S/Hold", Request::new(Bytes::new())).await }
    });
    eventually("held stream open", || server.opens().len() == 1).await;
    server.goaway.notify_waiters();
    server.goaway.notify_one();
    settle(Duration::from_millis(100)).await;
    for _ in 0..3 {
        guarded(
            "after goaway",
            ch.unary_raw("/t.S/Ok", Request::new(Bytes::new())),
        )
        .await
        .expect("a new connection");
    }
    let conns: Vec<usize> = server.opens().iter().map(|o| o.0).collect();
    assert_eq!(conns, vec![1, 2, 2, 2]);
    release.notify_waiters();
    release.notify_one();
    guarded("held", held)
        .await
        .expect("join")
        .expect("the old stream ran to completion");
    let _ = std::fs::remove_file(&path);
}

// ---- dns: target with the retry policy in the TXT record ---------------------------------------------------

#[tokio::test(start_paused = true)]
async fn dns_txt_retry_policy_applies_to_a_streaming_call() {
    let server = Raw::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            // Bidi echo; the first attempt fails after reading the first message.
            if s.prev() == 0 {
                if s.read_bytes(5 + 2).await.is_ok() {
                    s.trailers_only("14", &[]);
                }
                return;
            }
            let mut body = Vec::new();
            while let Some(Ok(chunk)) = s.recv.data().await {
                let _ = s.recv.flow_control().release_capacity(chunk.len());
                body.extend_from_slice(&chunk);
            }
            if let Some(mut out) = s.headers() {
                for (_, m) in deframe(&body) {
                    let _ = out.send_data(frame(&m), false);
                }
                let _ = out.send_trailers(trailers("0", &[]));
            }
        }),
    )
    .await;
    let dns = interop::dns::TestDns::start().await.expect("dns");
    dns.add_a("svc.test", std::net::Ipv4Addr::LOCALHOST).await;
    let config = retry_config(3, "0.1s", &["UNAVAILABLE"]);
    dns.set_service_config(
        "svc.test",
        &format!(r#"[{{"clientLanguage":["rust"],"serviceConfig":{config}}}]"#),
    )
    .await;
    let port = server.addr.expect("tcp").port();
    let ch = Channel::builder(format!("dns://{}/svc.test:{port}", dns.addr))
        .resolver_options(grpc_channel::ResolverOptions {
            query_timeout: Duration::from_secs(2),
            ..grpc_channel::ResolverOptions::default()
        })
        .build()
        .expect("channel");
    let got = guarded("dns bidi", async {
        let (mut tx, mut rx) = ch
            .streaming_raw(
                "/t.S/Bidi",
                Request::new(()).with_timeout(Duration::from_secs(20)),
            )
            .await
            .expect("start");
        for m in [&b"m0"[..], b"m1", b"m2"] {
            tx.send(Bytes::copy_from_slice(m)).await.expect("send");
        }
        tx.finish().await.expect("finish");
        let mut got = Vec::new();
        while let Some(m) = rx.message().await.expect("retried by the TXT policy") {
            got.push(m);
        }
        got
    })
    .await;
    assert_eq!(got, vec![&b"m0"[..], b"m1", b"m2"]);
    let prevs: Vec<Option<HeaderValue>> = server
        .opens()
        .iter()
        .map(|o| o.3.get("grpc-previous-rpc-attempts").cloned())
        .collect();
    assert_eq!(prevs, vec![None, Some(HeaderValue::from_static("1"))]);
}

// ---- many concurrent streaming calls ----------------------------------------------------------------------

/// 500 concurrent bidi calls under a retry policy, through a server allowing 100 streams at a time, the first
/// attempt of each failing after its first message: all finish OK with their messages replayed, every
/// server stream is closed, and the driver tasks are gone afterwards.
#[tokio::test(start_paused = true)]
async fn five_hundred_concurrent_bidi_calls_with_a_policy_all_finish_and_leave_no_tasks() {
    let _dog = watchdog("500 bidi calls", 240);
    fn hundred(b: &mut h2::server::Builder) {
        b.max_concurrent_streams(100);
    }
    let server = Raw::tcp(
        hundred,
        handler(|mut s: Stream| async move {
            if s.prev() == 0 {
                if s.read_bytes(5 + 2).await.is_ok() {
                    s.trailers_only("14", &[]);
                    push(
                        &s.log,
                        Ev::End {
                            conn: s.conn,
                            id: s.id,
                        },
                    );
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
                            let _ = out.send_data(frame(&m), false);
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
            push(
                &s.log,
                Ev::End {
                    conn: s.conn,
                    id: s.id,
                },
            );
        }),
    )
    .await;
    let ch = channel(&server.target(), &retry_config(3, "0.1s", &["UNAVAILABLE"]));
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
            Ev::End { conn, id } | Ev::Reset { conn, id, .. } => Some((*conn, *id)),
            _ => None,
        })
        .collect::<std::collections::HashSet<_>>()
        .len();
    let mut by_prev: HashMap<String, usize> = HashMap::new();
    for o in server.opens() {
        let p =
            o.3.get("grpc-previous-rpc-attempts")
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
