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
    /// Never answers; records the stream's reset when the client gives up.
    pub const SILENT: &str = "/fault.Faulty/Silent";
    /// Answers an empty message and returns the request headers as trailers `x-seen-<name>`.
    pub const ECHO_HEADERS: &str = "/fault.Faulty/EchoHeaders";
    /// Sends the response headers, then closes the TCP connection.
    pub const DROP_CONNECTION: &str = "/fault.Faulty/DropConnection";
    /// Stateful, for retry tests: counts attempts per `x-test-key` and records each attempt's
    /// `grpc-previous-rpc-attempts`. The first `x-fail-times` attempts fail: with status `x-fail-code` (and
    /// `grpc-retry-pushback-ms: x-pushback-ms` if given), or with RST_STREAM(REFUSED_STREAM) if `x-fail-mode:
    /// refuse`. Attempts listed in `x-hang-attempts` (e.g. `1,2`, counted as the client does:
    /// `grpc-previous-rpc-attempts` + 1, so the same on every backend) never answer. The others answer OK with
    /// an empty message and the trailer `x-attempt: N` (this server's count for the key).
    pub const FLAKY: &str = "/fault.Faulty/Flaky";
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
}

/// A running faulty server.
#[derive(Clone)]
pub struct FaultyServer {
    /// Where it listens.
    pub addr: SocketAddr,
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
            events: Arc::default(),
            attempts: Arc::default(),
            connections: Arc::default(),
        };
        let s = server.clone();
        tokio::spawn(async move {
            while let Ok((tcp, peer)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                if let Ok(mut n) = s.connections.lock() {
                    *n += 1;
                }
                tokio::spawn(s.clone().connection(tcp, peer));
            }
        });
        Ok(server)
    }

    /// The events seen so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// How many TCP connections were accepted.
    pub fn connections(&self) -> usize {
        self.connections.lock().map(|n| *n).unwrap_or_default()
    }

    async fn connection(self, tcp: tokio::net::TcpStream, peer: SocketAddr) {
        let Ok(mut conn) = h2_server_builder().handshake::<_, Bytes>(tcp).await else {
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
        if path == FLAKY {
            self.flaky(call).await;
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

    async fn flaky(&self, mut call: ServerCall) {
        let header = |name: &str| {
            call.request_headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let key = header("x-test-key").unwrap_or_default();
        let fail_times: u32 = header("x-fail-times")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let fail_code = header("x-fail-code").unwrap_or_else(|| "14".to_owned());
        let refuse = header("x-fail-mode").as_deref() == Some("refuse");
        let pushback = header("x-pushback-ms");
        let hang: Vec<u32> = header("x-hang-attempts")
            .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
            .unwrap_or_default();
        let number = match self.attempts.lock() {
            Ok(mut a) => {
                let n = a.entry(key.clone()).or_insert(0);
                *n += 1;
                *n
            }
            Err(_) => 0,
        };
        let previous = header("grpc-previous-rpc-attempts");
        let client_number = previous
            .as_deref()
            .and_then(|p| p.parse::<u32>().ok())
            .unwrap_or(0)
            + 1;
        self.record(Event::Attempt {
            key,
            number,
            previous_attempts: previous,
        });
        if number <= fail_times && refuse {
            call.reset(Reason::REFUSED_STREAM);
            return;
        }
        while let Ok(Some(_)) = call.next_message().await {}
        if hang.contains(&client_number) {
            let respond = call.respond_mut();
            if let Ok(reason) = poll_fn(|cx| respond.poll_reset(cx)).await {
                self.record(Event::Reset {
                    path: methods::FLAKY.to_owned(),
                    reason,
                });
            }
            call.mark_ended();
            return;
        }
        if number <= fail_times {
            let mut r = http::Response::new(());
            let h = r.headers_mut();
            h.insert("content-type", HeaderValue::from_static("application/grpc"));
            if let Ok(v) = HeaderValue::try_from(fail_code) {
                h.insert("grpc-status", v);
            }
            if let Some(p) = pushback.and_then(|p| HeaderValue::try_from(p).ok()) {
                h.insert("grpc-retry-pushback-ms", p);
            }
            let _ = call.respond_mut().send_response(r, true);
            call.mark_ended();
            return;
        }
        if let Ok(v) = HeaderValue::try_from(number.to_string()) {
            call.trailing_metadata.insert("x-attempt", v);
        }
        if call.send_message(&[], false).await.is_ok() {
            call.finish(&grpc_channel::Status::new(grpc_channel::Code::Ok, ""));
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
