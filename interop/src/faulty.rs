//! A deliberately broken gRPC server for tests: each method of the fictitious service `fault.Faulty` answers
//! in one wrong (or unusual) way, so a client can be checked to turn each into the documented status without
//! panicking or hanging. It also records what it saw (request headers, stream resets) for the tests to read.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use grpc_channel::metadata::encode_bin;
use grpc_channel::Encoding;
use h2::Reason;
use http::{HeaderMap, HeaderValue};
use prost::Message as _;
use std::sync::Mutex;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::server_call::{h2_server_builder, ServerCall};

/// The faults, by method name (`/fault.Faulty/<name>`).
pub mod methods {
    /// 200 with `content-type: text/html` and an HTML body, no trailers.
    pub const WRONG_CONTENT_TYPE: &str = "/fault.Faulty/WrongContentType";
    /// HTTP 503 without `grpc-status`.
    pub const HTTP_503: &str = "/fault.Faulty/Http503";
    /// HTTP 404 without `grpc-status`.
    pub const HTTP_404: &str = "/fault.Faulty/Http404";
    /// A message prefix announcing 100 bytes, 10 bytes, then END_STREAM with OK trailers.
    pub const TRUNCATED_FRAME: &str = "/fault.Faulty/TruncatedFrame";
    /// A message prefix announcing 5 MiB (over the default 4 MiB limit); the stream then stays open.
    pub const OVERSIZE: &str = "/fault.Faulty/Oversize";
    /// Trailers-Only with `grpc-status: abc`.
    pub const NON_NUMERIC_STATUS: &str = "/fault.Faulty/NonNumericStatus";
    /// A message, then trailers without `grpc-status`.
    pub const MISSING_STATUS: &str = "/fault.Faulty/MissingStatus";
    /// A message, then END_STREAM on the DATA frame and no trailers.
    pub const NO_TRAILERS: &str = "/fault.Faulty/NoTrailers";
    /// RST_STREAM(REFUSED_STREAM) at once.
    pub const RST_REFUSED: &str = "/fault.Faulty/RstRefused";
    /// RST_STREAM(ENHANCE_YOUR_CALM) at once.
    pub const RST_CALM: &str = "/fault.Faulty/RstCalm";
    /// RST_STREAM(CANCEL) after the response headers.
    pub const RST_CANCEL: &str = "/fault.Faulty/RstCancel";
    /// A message whose compressed flag is 2.
    pub const BAD_FLAG: &str = "/fault.Faulty/BadFlag";
    /// A compressed message on a response without `grpc-encoding`.
    pub const COMPRESSED_WITHOUT_ENCODING: &str = "/fault.Faulty/CompressedWithoutEncoding";
    /// A compressed message under `grpc-encoding: snappy`.
    pub const UNKNOWN_ENCODING: &str = "/fault.Faulty/UnknownEncoding";
    /// A "gzip" message that is not gzip.
    pub const GARBAGE_GZIP: &str = "/fault.Faulty/GarbageGzip";
    /// Two response messages (a cardinality violation for a unary call).
    pub const TWO_MESSAGES: &str = "/fault.Faulty/TwoMessages";
    /// OK with no response message.
    pub const NO_MESSAGE: &str = "/fault.Faulty/NoMessage";
    /// Trailers-Only with a status, a percent-encoded message, details and metadata.
    pub const RICH_STATUS: &str = "/fault.Faulty/RichStatus";
    /// Response headers, then RESOURCE_EXHAUSTED "slow down" in trailers with rich error details: RetryInfo
    /// (1.5 s), ErrorInfo (RATE_LIMITED, fault.test, {client: test}) and BadRequest (name: too long).
    pub const RICH_DETAILS: &str = "/fault.Faulty/RichDetails";
    /// Never answers; records the stream's reset when the client gives up.
    pub const SILENT: &str = "/fault.Faulty/Silent";
    /// Answers an empty message and returns the request headers as trailers `x-seen-<name>`.
    pub const ECHO_HEADERS: &str = "/fault.Faulty/EchoHeaders";
    /// Sends the response headers, then closes the TCP connection.
    pub const DROP_CONNECTION: &str = "/fault.Faulty/DropConnection";
    /// Stateful, for retry tests (unary): counts attempts per `x-test-key` and records each attempt's
    /// `grpc-previous-rpc-attempts`. The first `x-fail-times` attempts fail: with status `x-fail-code` (and
    /// `grpc-retry-pushback-ms: x-pushback-ms` if given), or with RST_STREAM(REFUSED_STREAM) if `x-fail-mode:
    /// refuse`. Attempts listed in `x-hang-attempts` (e.g. `1,2`, counted as the client does:
    /// `grpc-previous-rpc-attempts` + 1, so the same on every backend) never answer. The others answer OK with
    /// an empty message and the trailer `x-attempt: N` (this server's count for the key).
    ///
    /// The full set of request headers every `Flaky*` method understands is in [`super::FlakyHeaders`]; what
    /// each attempt did is recorded as [`super::Event::Attempt`] and [`super::Event::AttemptEnded`].
    pub const FLAKY: &str = "/fault.Faulty/Flaky";
    /// [`FLAKY`] for client streaming: reads every request message until the client half-closes, then fails
    /// (Trailers-Only) or hangs as the Flaky headers say, or answers one [`super::FlakyTotals`]: how many
    /// messages and bytes this attempt received.
    pub const FLAKY_CLIENT_STREAM: &str = "/fault.Faulty/FlakyClientStream";
    /// [`FLAKY`] for server streaming: reads the request (to the client's half-close), then fails
    /// (Trailers-Only) or hangs as the Flaky headers say, or answers `x-response-count` (default 1)
    /// [`super::FlakyItem`] messages.
    pub const FLAKY_SERVER_STREAM: &str = "/fault.Faulty/FlakyServerStream";
    /// [`FLAKY`] for bidi streaming: echoes each request message as it arrives, and ends OK when the client
    /// half-closes. A failing attempt reads the first request message (or the half-close) and then answers
    /// Trailers-Only with `x-fail-code`; with `x-fail-after-first-response: true` it echoes that first message
    /// (response headers and one message) and then fails in the trailers. A hanging attempt reads and never
    /// answers.
    pub const FLAKY_BIDI: &str = "/fault.Faulty/FlakyBidi";
    /// Sends GOAWAY(NO_ERROR) (covering the open stream, as h2 names the last accepted one) and closes.
    pub const GOAWAY: &str = "/fault.Faulty/Goaway";
}

/// What the faulty server saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// An attempt of a `Flaky` call.
    Attempt {
        /// The `x-test-key`.
        key: String,
        /// Which attempt this is for the key (1 = first).
        number: u32,
        /// Its `grpc-previous-rpc-attempts` header, if any.
        previous_attempts: Option<String>,
    },
    /// A stream was reset by the client with this reason.
    Reset {
        /// The method path.
        path: String,
        /// The RST_STREAM error code.
        reason: Reason,
    },
    /// How an attempt of a `Flaky*` call ended, and what it received. Recorded before the server sends the
    /// attempt's last frame (so a client that saw the attempt's status can read it), or when the server
    /// notices the client's reset.
    AttemptEnded {
        /// The `x-test-key`.
        key: String,
        /// Which attempt this is for the key on this server (1 = first), as in [`Event::Attempt`].
        number: u32,
        /// The method path.
        path: String,
        /// How many request messages this attempt received.
        messages: u32,
        /// The request messages' bytes (payloads without their 5-byte prefixes, after decompression).
        bytes: u64,
        /// How it ended.
        outcome: AttemptOutcome,
    },
}

/// How one attempt of a `Flaky*` call ended on the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// Refused with RST_STREAM(REFUSED_STREAM) before anything was read (`x-fail-mode: refuse`).
    Refused,
    /// Failed with this `grpc-status` (the `x-fail-code` text): Trailers-Only when `after_response` is false,
    /// trailers after a response message when it is true.
    Failed {
        /// The `grpc-status` sent.
        code: String,
        /// Whether response headers and a message went first.
        after_response: bool,
    },
    /// Answered and ended with OK.
    Ok,
    /// The client reset the stream with this reason (CANCEL when it gave the attempt up).
    Reset(Reason),
    /// The stream failed otherwise (e.g. the connection went away).
    Broken(String),
}

/// The response of [`methods::FLAKY_CLIENT_STREAM`]: what the attempt received.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct FlakyTotals {
    /// How many request messages the attempt received.
    #[prost(uint32, tag = "1")]
    pub messages: u32,
    /// Their bytes (payloads without the 5-byte prefixes).
    #[prost(uint64, tag = "2")]
    pub bytes: u64,
    /// This server's attempt number for the key (as the `x-attempt` trailer).
    #[prost(uint32, tag = "3")]
    pub attempt: u32,
}

/// One response of [`methods::FLAKY_SERVER_STREAM`].
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct FlakyItem {
    /// 0 for the first response of the attempt, then 1, 2, ...
    #[prost(uint32, tag = "1")]
    pub index: u32,
    /// The attempt as the client counts it: `grpc-previous-rpc-attempts` + 1 (so a hedge says 2 on any
    /// backend).
    #[prost(uint32, tag = "2")]
    pub client_attempt: u32,
    /// This server's attempt number for the key.
    #[prost(uint32, tag = "3")]
    pub attempt: u32,
}

/// A request message for the Flaky streaming methods (they only count request messages, so any bytes do;
/// this is a convenient prost message of a chosen size).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct FlakyMessage {
    /// Any bytes.
    #[prost(bytes = "bytes", tag = "1")]
    pub payload: Bytes,
}

/// The request headers the `Flaky*` methods read (all optional but `x-test-key`).
///
/// | header | meaning |
/// |---|---|
/// | `x-test-key` | attempts are counted per key (per server) |
/// | `x-fail-times: N` | attempts 1..=N (this server's count) fail |
/// | `x-fail-code: C` | the `grpc-status` of a failure (default 14, UNAVAILABLE) |
/// | `x-pushback-ms: P` | sent as `grpc-retry-pushback-ms` with a failure |
/// | `x-fail-mode: refuse` | failures are RST_STREAM(REFUSED_STREAM) before anything is read |
/// | `x-attempt-script: a,b,...` | overrides the three above: entry n decides attempt n (this server's count): `ok`, `refuse`, `hang`, or a status code to fail with; attempts past the list answer OK |
/// | `x-hang-attempts: 1,2` | these attempts, counted as the client does (`grpc-previous-rpc-attempts` + 1), never answer (unless refused) |
/// | `x-response-count: N` | [`methods::FLAKY_SERVER_STREAM`]: responses of a successful attempt (default 1) |
/// | `x-fail-after-first-response: true` | [`methods::FLAKY_BIDI`]: a failing attempt echoes the first message first |
#[derive(Clone, Debug, Default)]
pub struct FlakyHeaders {
    /// `x-test-key`.
    pub key: String,
    /// `grpc-previous-rpc-attempts`.
    pub previous_attempts: Option<String>,
    fail_times: u32,
    fail_code: String,
    pushback: Option<String>,
    refuse: bool,
    script: Option<Vec<String>>,
    hang: Vec<u32>,
    response_count: u32,
    fail_after_first_response: bool,
}

/// What one Flaky attempt does.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Plan {
    Refuse,
    Hang,
    Fail(String),
    Answer,
}

impl FlakyHeaders {
    /// Reads the headers of a request.
    pub fn parse(headers: &HeaderMap) -> FlakyHeaders {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let list = |v: String| -> Vec<String> {
            v.split(',')
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect()
        };
        FlakyHeaders {
            key: header("x-test-key").unwrap_or_default(),
            previous_attempts: header("grpc-previous-rpc-attempts"),
            fail_times: header("x-fail-times")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            fail_code: header("x-fail-code").unwrap_or_else(|| "14".to_owned()),
            pushback: header("x-pushback-ms"),
            refuse: header("x-fail-mode").as_deref() == Some("refuse"),
            script: header("x-attempt-script").map(list),
            hang: header("x-hang-attempts")
                .map(list)
                .unwrap_or_default()
                .iter()
                .filter_map(|n| n.parse().ok())
                .collect(),
            response_count: header("x-response-count")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1),
            fail_after_first_response: header("x-fail-after-first-response").as_deref()
                == Some("true"),
        }
    }

    /// The attempt as the client counts it: `grpc-previous-rpc-attempts` + 1.
    pub fn client_attempt(&self) -> u32 {
        self.previous_attempts
            .as_deref()
            .and_then(|p| p.parse::<u32>().ok())
            .unwrap_or(0)
            + 1
    }

    /// What attempt `number` (this server's count for the key) does.
    fn plan(&self, number: u32) -> Plan {
        let plan = match &self.script {
            Some(script) => match (number as usize)
                .checked_sub(1)
                .and_then(|i| script.get(i))
                .map(String::as_str)
            {
                None | Some("ok") => Plan::Answer,
                Some("refuse") => Plan::Refuse,
                Some("hang") => Plan::Hang,
                Some(code) => Plan::Fail(code.to_owned()),
            },
            None if number <= self.fail_times && self.refuse => Plan::Refuse,
            None if number <= self.fail_times => Plan::Fail(self.fail_code.clone()),
            None => Plan::Answer,
        };
        if plan != Plan::Refuse && self.hang.contains(&self.client_attempt()) {
            return Plan::Hang;
        }
        plan
    }
}

/// Which Flaky method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Unary,
    ClientStream,
    ServerStream,
    Bidi,
}

/// What one attempt received so far.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    messages: u32,
    bytes: u64,
}

/// How reading one request message went.
enum Read {
    Message(Bytes),
    HalfClosed,
    Failed(AttemptOutcome),
}

/// A running faulty server.
#[derive(Clone)]
pub struct FaultyServer {
    /// Where it listens (`0.0.0.0:0` for a server on a Unix socket).
    pub addr: SocketAddr,
    unix: Option<Arc<std::path::PathBuf>>,
    events: Arc<Mutex<Vec<Event>>>,
    attempts: Arc<Mutex<std::collections::HashMap<String, u32>>>,
    connections: Arc<Mutex<usize>>,
}

impl FaultyServer {
    /// Starts a faulty server on a free loopback port.
    pub async fn start() -> std::io::Result<FaultyServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let server = FaultyServer {
            addr: listener.local_addr()?,
            ..FaultyServer::detached()
        };
        let s = server.clone();
        tokio::spawn(async move {
            while let Ok((tcp, peer)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                s.count_connection();
                tokio::spawn(s.clone().serve_connection(tcp, peer));
            }
        });
        Ok(server)
    }

    /// Starts a faulty server on a Unix socket at `path` (removing a stale socket file there first).
    pub async fn start_unix(path: impl AsRef<std::path::Path>) -> std::io::Result<FaultyServer> {
        let path = path.as_ref().to_path_buf();
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path)?;
        let server = FaultyServer {
            unix: Some(Arc::new(path)),
            ..FaultyServer::detached()
        };
        let s = server.clone();
        let peer = SocketAddr::from(([0, 0, 0, 0], 0));
        tokio::spawn(async move {
            while let Ok((io, _)) = listener.accept().await {
                s.count_connection();
                tokio::spawn(s.clone().serve_connection(io, peer));
            }
        });
        Ok(server)
    }

    /// A faulty server with no listener of its own: connections reach it through
    /// [`FaultyServer::serve_connection`] (e.g. from [`crate::raw::RawServer`]).
    pub fn detached() -> FaultyServer {
        FaultyServer {
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            unix: None,
            events: Arc::default(),
            attempts: Arc::default(),
            connections: Arc::default(),
        }
    }

    /// The channel target that reaches this server: `ipv4:127.0.0.1:PORT` or `unix:PATH`.
    pub fn target(&self) -> String {
        match &self.unix {
            Some(path) => format!("unix:{}", path.display()),
            None => format!("ipv4:{}", self.addr),
        }
    }

    /// The events seen so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// How many connections its own listener accepted (connections handed to
    /// [`FaultyServer::serve_connection`] by someone else are not counted).
    pub fn connections(&self) -> usize {
        self.connections.lock().map(|n| *n).unwrap_or_default()
    }

    fn count_connection(&self) {
        if let Ok(mut n) = self.connections.lock() {
            *n += 1;
        }
    }

    /// Serves one HTTP/2 connection (any byte stream) until it closes, recording into this server's events.
    pub async fn serve_connection<T>(self, io: T, peer: SocketAddr)
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Ok(mut conn) = h2_server_builder().handshake::<_, Bytes>(io).await else {
            return;
        };
        let kill = Arc::new(Notify::new());
        let goaway = Arc::new(Notify::new());
        let closed = Arc::new(Notify::new());
        // Tells the faults that hold their call open that the connection is gone.
        let _closed_on_exit = NotifyOnDrop(closed.clone());
        loop {
            tokio::select! {
                next = conn.accept() => match next {
                    Some(Ok((request, respond))) => {
                        let call = ServerCall::new(request, respond, peer);
                        let signals = Signals { kill: kill.clone(), goaway: goaway.clone(), closed: closed.clone() };
                        tokio::spawn(self.clone().fault(call, signals));
                    }
                    _ => return,
                },
                () = kill.notified() => return,
                () = goaway.notified() => {
                    // h2 names the last accepted stream in the GOAWAY, so the open call is covered by it.
                    conn.abrupt_shutdown(Reason::NO_ERROR);
                    let _ = poll_fn(|cx| conn.poll_closed(cx)).await;
                    return;
                }
            }
        }
    }

    async fn fault(self, mut call: ServerCall, signals: Signals) {
        use methods::*;
        let grpc_headers = || {
            let mut r = http::Response::new(());
            r.headers_mut()
                .insert("content-type", HeaderValue::from_static("application/grpc"));
            r
        };
        let path = call.path.clone();
        let shape = match path.as_str() {
            FLAKY => Some(Shape::Unary),
            FLAKY_CLIENT_STREAM => Some(Shape::ClientStream),
            FLAKY_SERVER_STREAM => Some(Shape::ServerStream),
            FLAKY_BIDI => Some(Shape::Bidi),
            _ => None,
        };
        if let Some(shape) = shape {
            self.flaky(call, shape).await;
            return;
        }
        // Read the request (unary or not) before answering, as servers do.
        if path != SILENT && path != RST_REFUSED && path != RST_CALM && path != GOAWAY {
            while let Ok(Some(_)) = call.next_message().await {}
        }
        match path.as_str() {
            WRONG_CONTENT_TYPE => {
                let mut r = http::Response::new(());
                r.headers_mut()
                    .insert("content-type", HeaderValue::from_static("text/html"));
                if let Ok(mut s) = call.respond_mut().send_response(r, false) {
                    let _ = s.send_data(Bytes::from_static(b"<html>not grpc</html>"), true);
                }
                call.mark_ended();
            }
            HTTP_503 | HTTP_404 => {
                let mut r = http::Response::new(());
                *r.status_mut() = if path == HTTP_503 {
                    http::StatusCode::SERVICE_UNAVAILABLE
                } else {
                    http::StatusCode::NOT_FOUND
                };
                let _ = call.respond_mut().send_response(r, true);
                call.mark_ended();
            }
            TRUNCATED_FRAME => {
                let mut b = BytesMut::new();
                b.put_u8(0);
                b.put_u32(100);
                b.extend_from_slice(&[0; 10]);
                if let Ok(mut s) = call.respond_mut().send_response(grpc_headers(), false) {
                    let _ = s.send_data(b.freeze(), false);
                    let _ = s.send_trailers(status_trailers("0"));
                }
                call.mark_ended();
            }
            OVERSIZE => {
                let mut b = BytesMut::new();
                b.put_u8(0);
                b.put_u32(5 << 20);
                b.extend_from_slice(&[0; 1000]);
                if let Ok(mut s) = call.respond_mut().send_response(grpc_headers(), false) {
                    let _ = s.send_data(b.freeze(), false);
                    self.wait_reset(&path, &mut s).await;
                }
                call.mark_ended();
            }
            NON_NUMERIC_STATUS => {
                let mut r = grpc_headers();
                r.headers_mut().extend(status_trailers("abc"));
                let _ = call.respond_mut().send_response(r, true);
                call.mark_ended();
            }
            MISSING_STATUS => {
                if let Ok(mut s) = call.respond_mut().send_response(grpc_headers(), false) {
                    let _ = s.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), false);
                    let mut t = HeaderMap::new();
                    t.insert("x-something", HeaderValue::from_static("else"));
                    let _ = s.send_trailers(t);
                }
                call.mark_ended();
            }
            NO_TRAILERS => {
                if let Ok(mut s) = call.respond_mut().send_response(grpc_headers(), false) {
                    let _ = s.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true);
                }
                call.mark_ended();
            }
            RST_REFUSED => call.reset(Reason::REFUSED_STREAM),
            RST_CALM => call.reset(Reason::ENHANCE_YOUR_CALM),
            RST_CANCEL => {
                let _ = call.send_headers();
                call.reset(Reason::CANCEL);
            }
            BAD_FLAG => raw_message(&mut call, None, Bytes::from_static(&[2, 0, 0, 0, 0])),
            COMPRESSED_WITHOUT_ENCODING => {
                raw_message(&mut call, None, gzip_frame(b""));
            }
            UNKNOWN_ENCODING => raw_message(
                &mut call,
                Some("snappy"),
                Bytes::from_static(&[1, 0, 0, 0, 1, 0]),
            ),
            GARBAGE_GZIP => raw_message(
                &mut call,
                Some("gzip"),
                Bytes::from_static(&[1, 0, 0, 0, 3, 1, 2, 3]),
            ),
            TWO_MESSAGES => raw_message(
                &mut call,
                None,
                Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            ),
            NO_MESSAGE => raw_message(&mut call, None, Bytes::new()),
            RICH_DETAILS => {
                let details = grpc_channel::ErrorDetails::new()
                    .with_retry_delay(std::time::Duration::from_millis(1500))
                    .with_error_info(
                        "RATE_LIMITED",
                        "fault.test",
                        [("client".to_owned(), "test".to_owned())],
                    )
                    .with_field_violation("name", "too long");
                let status = grpc_channel::Status::with_details(
                    grpc_channel::Code::ResourceExhausted,
                    "slow down",
                    details,
                );
                if call.send_headers().is_ok() {
                    call.finish(&status);
                }
            }
            RICH_STATUS => {
                let mut r = grpc_headers();
                let h = r.headers_mut();
                h.extend(status_trailers("9"));
                h.insert(
                    "grpc-message",
                    HeaderValue::from_static("caf%C3%A9 %ZZ 100%25"),
                );
                if let Ok(v) = HeaderValue::try_from(encode_bin(&[8, 9])) {
                    h.insert("grpc-status-details-bin", v);
                }
                h.insert("x-extra", HeaderValue::from_static("kept"));
                let _ = call.respond_mut().send_response(r, true);
                call.mark_ended();
            }
            SILENT => {
                let respond = call.respond_mut();
                if let Ok(reason) = poll_fn(|cx| respond.poll_reset(cx)).await {
                    self.record(Event::Reset {
                        path: path.clone(),
                        reason,
                    });
                }
                call.mark_ended();
            }
            ECHO_HEADERS => {
                let mut trailers = status_trailers("0");
                if let Ok(v) = HeaderValue::try_from(call.authority.clone()) {
                    trailers.insert("x-seen-authority", v);
                }
                for (k, v) in &call.request_headers {
                    if let Ok(name) = http::HeaderName::try_from(format!("x-seen-{}", k.as_str())) {
                        trailers.append(name, v.clone());
                    }
                }
                if let Ok(mut s) = call.respond_mut().send_response(grpc_headers(), false) {
                    let _ = s.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), false);
                    let _ = s.send_trailers(trailers);
                }
                call.mark_ended();
            }
            DROP_CONNECTION => {
                let _ = call.send_headers();
                call.mark_ended();
                signals.kill.notify_one();
                // Hold the call: dropping it first would send RST_STREAM(CANCEL) before the connection closes.
                signals.closed.notified().await;
            }
            GOAWAY => {
                call.mark_ended();
                signals.goaway.notify_one();
                signals.closed.notified().await;
            }
            _ => call.finish(&grpc_channel::Status::new(
                grpc_channel::Code::Unimplemented,
                "no such fault",
            )),
        }
    }

    /// Counts an attempt for `key` on this server.
    fn count_attempt(&self, key: &str) -> u32 {
        match self.attempts.lock() {
            Ok(mut a) => {
                let n = a.entry(key.to_owned()).or_insert(0);
                *n += 1;
                *n
            }
            Err(_) => 0,
        }
    }

    async fn flaky(&self, mut call: ServerCall, shape: Shape) {
        let headers = FlakyHeaders::parse(&call.request_headers);
        let number = self.count_attempt(&headers.key);
        self.record(Event::Attempt {
            key: headers.key.clone(),
            number,
            previous_attempts: headers.previous_attempts.clone(),
        });
        let plan = headers.plan(number);
        let attempt = FlakyAttempt {
            server: self,
            key: headers.key.clone(),
            number,
            path: call.path.clone(),
        };
        let mut tally = Tally::default();
        if plan == Plan::Refuse {
            attempt.ended(tally, AttemptOutcome::Refused);
            call.reset(Reason::REFUSED_STREAM);
            return;
        }
        if shape == Shape::Bidi {
            return attempt.bidi(call, &headers, plan).await;
        }
        // Unary, client and server streaming: read the whole request first.
        loop {
            match attempt.read(&mut call, &mut tally).await {
                Read::Message(_) => {}
                Read::HalfClosed => break,
                Read::Failed(outcome) => return attempt.ended(tally, outcome),
            }
        }
        match plan {
            Plan::Refuse => {}
            Plan::Hang => attempt.hang(&mut call, tally).await,
            Plan::Fail(code) => {
                attempt.ended(
                    tally,
                    AttemptOutcome::Failed {
                        code: code.clone(),
                        after_response: false,
                    },
                );
                fail_trailers_only(&mut call, &code, headers.pushback.as_deref());
            }
            Plan::Answer => {
                if let Ok(v) = HeaderValue::try_from(number.to_string()) {
                    call.trailing_metadata.insert("x-attempt", v);
                }
                let messages: Vec<Vec<u8>> = match shape {
                    Shape::Unary | Shape::Bidi => vec![Vec::new()],
                    Shape::ClientStream => vec![FlakyTotals {
                        messages: tally.messages,
                        bytes: tally.bytes,
                        attempt: number,
                    }
                    .encode_to_vec()],
                    Shape::ServerStream => (0..headers.response_count)
                        .map(|index| {
                            FlakyItem {
                                index,
                                client_attempt: headers.client_attempt(),
                                attempt: number,
                            }
                            .encode_to_vec()
                        })
                        .collect(),
                };
                for m in &messages {
                    if call.send_message(m, false).await.is_err() {
                        let outcome = attempt.stream_failure(&mut call);
                        return attempt.ended(tally, outcome);
                    }
                }
                attempt.ended(tally, AttemptOutcome::Ok);
                call.finish(&grpc_channel::Status::new(grpc_channel::Code::Ok, ""));
            }
        }
    }

    async fn wait_reset(&self, path: &str, send: &mut h2::SendStream<Bytes>) {
        if let Ok(reason) = poll_fn(|cx| send.poll_reset(cx)).await {
            self.record(Event::Reset {
                path: path.to_owned(),
                reason,
            });
        }
    }

    fn record(&self, event: Event) {
        if let Ok(mut e) = self.events.lock() {
            e.push(event);
        }
    }
}

/// One attempt of a `Flaky*` call, for recording how it ends.
struct FlakyAttempt<'a> {
    server: &'a FaultyServer,
    key: String,
    number: u32,
    path: String,
}

impl FlakyAttempt<'_> {
    fn ended(&self, tally: Tally, outcome: AttemptOutcome) {
        if let AttemptOutcome::Reset(reason) = outcome {
            self.server.record(Event::Reset {
                path: self.path.clone(),
                reason,
            });
        }
        self.server.record(Event::AttemptEnded {
            key: self.key.clone(),
            number: self.number,
            path: self.path.clone(),
            messages: tally.messages,
            bytes: tally.bytes,
            outcome,
        });
    }

    /// Reads one request message, counting it.
    async fn read(&self, call: &mut ServerCall, tally: &mut Tally) -> Read {
        match call.next_message().await {
            Ok(Some(m)) => {
                tally.messages += 1;
                tally.bytes += m.payload.len() as u64;
                Read::Message(m.payload)
            }
            Ok(None) => Read::HalfClosed,
            Err(status) => match self.reset_now(call) {
                Some(reason) => Read::Failed(AttemptOutcome::Reset(reason)),
                None => Read::Failed(AttemptOutcome::Broken(status.message().to_owned())),
            },
        }
    }

    /// The client's reset, if it already came.
    fn reset_now(&self, call: &mut ServerCall) -> Option<Reason> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let polled = match call.send_stream_mut() {
            Some(send) => send.poll_reset(&mut cx),
            None => call.respond_mut().poll_reset(&mut cx),
        };
        match polled {
            std::task::Poll::Ready(Ok(reason)) => Some(reason),
            _ => None,
        }
    }

    /// How the stream failed after a send error: the client's reset, or something else.
    fn stream_failure(&self, call: &mut ServerCall) -> AttemptOutcome {
        match self.reset_now(call) {
            Some(reason) => AttemptOutcome::Reset(reason),
            None => AttemptOutcome::Broken("the response could not be sent".to_owned()),
        }
    }

    /// Never answers: waits for the client to reset the stream (or the connection to go).
    async fn hang(&self, call: &mut ServerCall, tally: Tally) {
        let reset = match call.send_stream_mut() {
            Some(send) => poll_fn(|cx| send.poll_reset(cx)).await,
            None => {
                let respond = call.respond_mut();
                poll_fn(|cx| respond.poll_reset(cx)).await
            }
        };
        let outcome = match reset {
            Ok(reason) => AttemptOutcome::Reset(reason),
            Err(e) => AttemptOutcome::Broken(e.to_string()),
        };
        call.mark_ended();
        self.ended(tally, outcome);
    }

    async fn bidi(&self, mut call: ServerCall, headers: &FlakyHeaders, plan: Plan) {
        let mut tally = Tally::default();
        match plan {
            Plan::Refuse => {}
            Plan::Hang => {
                // Keep reading (so the client is not blocked on flow control), never answer.
                loop {
                    match self.read(&mut call, &mut tally).await {
                        Read::Message(_) => {}
                        Read::HalfClosed => break,
                        Read::Failed(outcome) => return self.ended(tally, outcome),
                    }
                }
                self.hang(&mut call, tally).await;
            }
            Plan::Fail(code) => {
                let first = match self.read(&mut call, &mut tally).await {
                    Read::Message(m) => Some(m),
                    Read::HalfClosed => None,
                    Read::Failed(outcome) => return self.ended(tally, outcome),
                };
                match first {
                    Some(m) if headers.fail_after_first_response => {
                        if call.send_message(&m, false).await.is_err() {
                            let outcome = self.stream_failure(&mut call);
                            return self.ended(tally, outcome);
                        }
                        self.ended(
                            tally,
                            AttemptOutcome::Failed {
                                code: code.clone(),
                                after_response: true,
                            },
                        );
                        let mut trailers = HeaderMap::new();
                        if let Ok(v) = HeaderValue::try_from(code) {
                            trailers.insert("grpc-status", v);
                        }
                        if let Some(p) = headers
                            .pushback
                            .as_deref()
                            .and_then(|p| HeaderValue::try_from(p).ok())
                        {
                            trailers.insert("grpc-retry-pushback-ms", p);
                        }
                        if let Some(send) = call.send_stream_mut() {
                            let _ = send.send_trailers(trailers);
                        }
                        call.mark_ended();
                    }
                    _ => {
                        self.ended(
                            tally,
                            AttemptOutcome::Failed {
                                code: code.clone(),
                                after_response: false,
                            },
                        );
                        fail_trailers_only(&mut call, &code, headers.pushback.as_deref());
                    }
                }
            }
            Plan::Answer => {
                loop {
                    match self.read(&mut call, &mut tally).await {
                        Read::Message(m) => {
                            if call.send_message(&m, false).await.is_err() {
                                let outcome = self.stream_failure(&mut call);
                                return self.ended(tally, outcome);
                            }
                        }
                        Read::HalfClosed => break,
                        Read::Failed(outcome) => return self.ended(tally, outcome),
                    }
                }
                if let Ok(v) = HeaderValue::try_from(self.number.to_string()) {
                    call.trailing_metadata.insert("x-attempt", v);
                }
                self.ended(tally, AttemptOutcome::Ok);
                call.finish(&grpc_channel::Status::new(grpc_channel::Code::Ok, ""));
            }
        }
    }
}

/// Fails the call before any response: one HEADERS frame with END_STREAM carrying `grpc-status` (and the
/// pushback, if any), as gRPC servers do for errors before the first message.
fn fail_trailers_only(call: &mut ServerCall, code: &str, pushback: Option<&str>) {
    let mut r = http::Response::new(());
    let h = r.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/grpc"));
    if let Ok(v) = HeaderValue::try_from(code) {
        h.insert("grpc-status", v);
    }
    if let Some(p) = pushback.and_then(|p| HeaderValue::try_from(p).ok()) {
        h.insert("grpc-retry-pushback-ms", p);
    }
    let _ = call.respond_mut().send_response(r, true);
    call.mark_ended();
}

/// How a fault reaches its connection's task.
struct Signals {
    kill: Arc<Notify>,
    goaway: Arc<Notify>,
    closed: Arc<Notify>,
}

struct NotifyOnDrop(Arc<Notify>);

impl Drop for NotifyOnDrop {
    fn drop(&mut self) {
        self.0.notify_waiters();
        self.0.notify_one();
    }
}

fn status_trailers(code: &'static str) -> HeaderMap {
    let mut t = HeaderMap::new();
    t.insert("grpc-status", HeaderValue::from_static(code));
    t
}

fn gzip_frame(payload: &[u8]) -> Bytes {
    let mut b = BytesMut::from(&[0u8; 5][..]);
    let _ = Encoding::Gzip.compress(payload, &mut b);
    let len = (b.len() - 5) as u32;
    b[0] = 1;
    b[1..5].copy_from_slice(&len.to_be_bytes());
    b.freeze()
}

/// Response headers (with `grpc-encoding` if given), `data` as-is, then OK trailers.
fn raw_message(call: &mut ServerCall, encoding: Option<&'static str>, data: Bytes) {
    let mut r = http::Response::new(());
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    if let Some(enc) = encoding {
        r.headers_mut()
            .insert("grpc-encoding", HeaderValue::from_static(enc));
    }
    if let Ok(mut s) = call.respond_mut().send_response(r, false) {
        if !data.is_empty() {
            let _ = s.send_data(data, false);
        }
        let _ = s.send_trailers(status_trailers("0"));
    }
    call.mark_ended();
}

#[cfg(test)]
#[path = "faulty_tests.rs"]
mod tests;
