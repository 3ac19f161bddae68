//! A scriptable h2 server over TCP or a Unix socket, in plaintext or TLS ([`H2Server::tls`],
//! [`H2Server::unix_tls`]): each stream goes to a handler the test writes (a [`Stream`] with the request and
//! the means to answer it), and the server logs every stream opened, DATA chunk, END_STREAM and reset, per
//! connection, and counts the connections accepted and ended. A test can make every live connection shut
//! down gracefully ([`H2Server::goaway`]), one connection ([`H2Server::goaway_connection`], or a handler its
//! own: [`Stream::goaway_connection`]), or every connection from now on ([`H2Server::drain`]); or drop them
//! all ([`H2Server::kill`]).
//!
//! Also the plain answers the tests' own small servers give: [`response_head`], [`trailers`], [`answer`].

use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, HeaderValue};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, Notify};
use tokio_rustls::TlsAcceptor;

use crate::frames::grpc_message;

/// The service the tests of the scriptable server call (the server answers any path).
pub const SVC: &str = "t.S";

/// What the server saw, in order.
#[derive(Clone, Debug)]
pub enum Event {
    /// A stream opened.
    Open(Opened),
    /// A DATA chunk from the client.
    Data {
        /// The connection, numbered from 1 in the order accepted.
        conn: usize,
        /// The stream id.
        id: u32,
        /// The chunk.
        bytes: Bytes,
    },
    /// END_STREAM from the client (or, where a handler logs it, the end of the exchange).
    End {
        /// The connection.
        conn: usize,
        /// The stream id.
        id: u32,
    },
    /// RST_STREAM from the client (or another stream error).
    Reset(Reset),
}

/// A stream as it opened.
#[derive(Clone, Debug)]
pub struct Opened {
    /// The connection, numbered from 1 in the order accepted.
    pub conn: usize,
    /// The stream id.
    pub id: u32,
    /// The request's path.
    pub path: String,
    /// The request headers.
    pub headers: HeaderMap,
    /// The request's `:authority`.
    pub authority: Option<String>,
    /// The request's `:scheme`.
    pub scheme: Option<String>,
}

impl Opened {
    /// The `grpc-previous-rpc-attempts` header, if any.
    pub fn previous_attempts(&self) -> Option<String> {
        header(&self.headers, "grpc-previous-rpc-attempts")
    }
}

/// A stream that ended in a reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reset {
    /// The connection.
    pub conn: usize,
    /// The stream id.
    pub id: u32,
    /// The reason.
    pub reason: Reason,
}

type Log = Arc<Mutex<Vec<Event>>>;

fn push(log: &Log, event: Event) {
    log.lock().expect("log").push(event);
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// One stream, as the handler gets it.
pub struct Stream {
    /// The connection, numbered from 1.
    pub conn: usize,
    /// The stream id.
    pub id: u32,
    /// The request's path.
    pub path: String,
    /// The request headers.
    pub headers: HeaderMap,
    /// The request body.
    pub recv: RecvStream,
    /// The response.
    pub respond: SendResponse<Bytes>,
    log: Log,
    goaway: Arc<Notify>,
}

/// What the server does with each stream.
pub type Handler = Arc<dyn Fn(Stream) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A [`Handler`] from an async closure.
pub fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Stream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Arc::new(move |s| Box::pin(f(s)))
}

/// h2's default server settings.
pub fn defaults(_: &mut h2::server::Builder) {}

/// The stream window of [`small_window`] servers: a message of this many bytes (prefix included) fills it.
pub const SMALL_WINDOW: usize = 1000;

/// Server settings with a [`SMALL_WINDOW`]-byte stream window.
pub fn small_window(b: &mut h2::server::Builder) {
    b.initial_window_size(SMALL_WINDOW as u32);
}

/// When a [`reads_then_answers`] server sends its response headers.
#[derive(Clone, Copy, Debug)]
pub enum HeadersAt {
    /// At once (the call commits).
    Start,
    /// After this long.
    After(std::time::Duration),
    /// Once it has read the whole request.
    AfterReading,
}

/// A server that sends its response headers as `headers` says, starts reading `read_after` after the
/// stream opened (and its headers went), reads the whole request, then answers `done` and OK.
pub fn reads_then_answers(headers: HeadersAt, read_after: std::time::Duration) -> Handler {
    reads_then_answers_with(headers, read_after, b"done")
}

/// [`reads_then_answers`], answering a message of `payload` instead of `done`.
pub fn reads_then_answers_with(
    headers: HeadersAt,
    read_after: std::time::Duration,
    payload: &'static [u8],
) -> Handler {
    handler(move |mut s: Stream| async move {
        let mut send = match headers {
            HeadersAt::Start => s.headers(),
            HeadersAt::After(delay) => {
                tokio::time::sleep(delay).await;
                s.headers()
            }
            HeadersAt::AfterReading => None,
        };
        if send.is_none() && !matches!(headers, HeadersAt::AfterReading) {
            return;
        }
        if !read_after.is_zero() {
            tokio::time::sleep(read_after).await;
        }
        if s.read_to_end().await.is_err() {
            return;
        }
        let Some(mut send) = send.take().or_else(|| s.headers()) else {
            return;
        };
        let _ = send.send_data(grpc_message(payload), false);
        let _ = send.send_trailers(trailers("0", &[]));
    })
}

/// A server that answers response headers at once and, `after` that, a message of `payload` and OK,
/// without reading the request; then it drops the stream's handles (h2 resets a request stream the client
/// has not finished with RST_STREAM(NO_ERROR)).
pub fn answers_without_reading(after: std::time::Duration, payload: &'static [u8]) -> Handler {
    handler(move |mut s: Stream| async move {
        let Some(mut send) = s.headers() else { return };
        tokio::time::sleep(after).await;
        let _ = send.send_data(grpc_message(payload), false);
        let _ = send.send_trailers(trailers("0", &[]));
    })
}

/// The scriptable server; clones share it.
#[derive(Clone)]
pub struct H2Server {
    addr: Option<SocketAddr>,
    path: Option<PathBuf>,
    log: Log,
    goaway: Arc<Notify>,
    /// Each live connection's own GOAWAY, by number.
    conn_goaway: Arc<Mutex<HashMap<usize, Arc<Notify>>>>,
    drain: Arc<watch::Sender<bool>>,
    kill: Arc<watch::Sender<bool>>,
    conns: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
}

impl H2Server {
    fn new(addr: Option<SocketAddr>, path: Option<PathBuf>) -> H2Server {
        H2Server {
            addr,
            path,
            log: Arc::default(),
            goaway: Arc::new(Notify::new()),
            conn_goaway: Arc::default(),
            drain: Arc::new(watch::channel(false).0),
            kill: Arc::new(watch::channel(false).0),
            conns: Arc::default(),
            closed: Arc::default(),
        }
    }

    /// A server on a free loopback port.
    pub async fn tcp(configure: fn(&mut h2::server::Builder), h: Handler) -> H2Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        H2Server::serve_tcp(listener, configure, h)
    }

    /// A server on `listener`.
    pub fn serve_tcp(
        listener: TcpListener,
        configure: fn(&mut h2::server::Builder),
        h: Handler,
    ) -> H2Server {
        H2Server::serve_tcp_with(listener, None, configure, h)
    }

    /// A TLS server on a free loopback port, with `config` (its ALPN included).
    pub async fn tls(
        config: Arc<rustls::ServerConfig>,
        configure: fn(&mut h2::server::Builder),
        h: Handler,
    ) -> H2Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        H2Server::serve_tcp_with(listener, Some(TlsAcceptor::from(config)), configure, h)
    }

    fn serve_tcp_with(
        listener: TcpListener,
        tls: Option<TlsAcceptor>,
        configure: fn(&mut h2::server::Builder),
        h: Handler,
    ) -> H2Server {
        let server = H2Server::new(Some(listener.local_addr().expect("addr")), None);
        let s = server.clone();
        let mut kill = server.kill.subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    a = listener.accept() => match a {
                        Ok((tcp, _)) => {
                            let _ = tcp.set_nodelay(true);
                            s.accepted(tcp, tls.clone(), configure, h.clone());
                        }
                        Err(_) => return,
                    },
                    _ = kill.changed() => return,
                }
            }
        });
        server
    }

    /// A server on the Unix socket `path` (an old socket file there is removed first).
    pub fn unix(path: PathBuf, configure: fn(&mut h2::server::Builder), h: Handler) -> H2Server {
        H2Server::unix_with(path, None, configure, h)
    }

    /// A TLS server on the Unix socket `path`, with `config` (an old socket file there is removed first).
    pub fn unix_tls(
        path: PathBuf,
        config: Arc<rustls::ServerConfig>,
        configure: fn(&mut h2::server::Builder),
        h: Handler,
    ) -> H2Server {
        H2Server::unix_with(path, Some(TlsAcceptor::from(config)), configure, h)
    }

    fn unix_with(
        path: PathBuf,
        tls: Option<TlsAcceptor>,
        configure: fn(&mut h2::server::Builder),
        h: Handler,
    ) -> H2Server {
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).expect("bind unix");
        let server = H2Server::new(None, Some(path));
        let s = server.clone();
        let mut kill = server.kill.subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    a = listener.accept() => match a {
                        Ok((io, _)) => s.accepted(io, tls.clone(), configure, h.clone()),
                        Err(_) => return,
                    },
                    _ = kill.changed() => return,
                }
            }
        });
        server
    }

    /// Numbers an accepted connection and serves it (after the TLS handshake, if any) on a task of its own;
    /// counts it as ended when it ends.
    fn accepted<T>(
        &self,
        io: T,
        tls: Option<TlsAcceptor>,
        configure: fn(&mut h2::server::Builder),
        h: Handler,
    ) where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let n = self.conns.fetch_add(1, Ordering::SeqCst) + 1;
        let s = self.clone();
        tokio::spawn(async move {
            match tls {
                None => s.clone().connection(io, n, configure, h).await,
                Some(acceptor) => {
                    if let Ok(io) = acceptor.accept(io).await {
                        s.clone().connection(io, n, configure, h).await;
                    }
                }
            }
            s.conn_goaway.lock().expect("goaway").remove(&n);
            s.closed.fetch_add(1, Ordering::SeqCst);
        });
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
        let mut drain = self.drain.subscribe();
        let mut draining = false;
        let own_goaway = Arc::new(Notify::new());
        self.conn_goaway
            .lock()
            .expect("goaway")
            .insert(n, own_goaway.clone());
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
                        push(&self.log, Event::Open(Opened {
                            conn: n,
                            id,
                            path: path.clone(),
                            headers: parts.headers.clone(),
                            authority: parts.uri.authority().map(ToString::to_string),
                            scheme: parts.uri.scheme_str().map(str::to_owned),
                        }));
                        let s = Stream {
                            conn: n,
                            id,
                            path,
                            headers: parts.headers,
                            recv,
                            respond,
                            log: self.log.clone(),
                            goaway: own_goaway.clone(),
                        };
                        tokio::spawn(h(s));
                    }
                    _ => return,
                },
                () = self.goaway.notified() => conn.graceful_shutdown(),
                () = own_goaway.notified() => conn.graceful_shutdown(),
                changed = drain.wait_for(|d| *d), if !draining => {
                    draining = true;
                    if changed.is_ok() {
                        conn.graceful_shutdown();
                    }
                }
                _ = kill.changed() => return,
            }
        }
    }

    /// Makes every live connection start a graceful shutdown (GOAWAY 2^31-1, PING, GOAWAY last-stream-id),
    /// and the next connection to look too.
    pub fn goaway(&self) {
        self.goaway.notify_waiters();
        self.goaway.notify_one();
    }

    /// Makes connection `n` (numbered from 1) start a graceful shutdown, if it is live.
    pub fn goaway_connection(&self, n: usize) {
        if let Some(goaway) = self.conn_goaway.lock().expect("goaway").get(&n) {
            goaway.notify_one();
        }
    }

    /// Makes every connection, live or later, start a graceful shutdown.
    pub fn drain(&self) {
        let _ = self.drain.send(true);
    }

    /// Stops listening and drops every connection (the socket closes).
    pub fn kill(&self) {
        let _ = self.kill.send(true);
    }

    /// The TCP address (a TCP server only).
    pub fn addr(&self) -> SocketAddr {
        self.addr.expect("a TCP server")
    }

    /// The channel target: `ipv4:` address or `unix:` path.
    pub fn target(&self) -> String {
        match (&self.addr, &self.path) {
            (Some(a), _) => format!("ipv4:{a}"),
            (None, Some(p)) => format!("unix:{}", p.display()),
            _ => unreachable!(),
        }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.conns.load(Ordering::SeqCst)
    }

    /// Connections that ended so far (closed by the client, failed, or killed).
    pub fn closed_connections(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    /// Everything seen so far, in order.
    pub fn events(&self) -> Vec<Event> {
        self.log.lock().expect("log").clone()
    }

    /// Every stream opened, in order.
    pub fn opens(&self) -> Vec<Opened> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Open(o) => Some(o),
                _ => None,
            })
            .collect()
    }

    /// How many streams opened on `path`.
    pub fn opens_of(&self, path: &str) -> usize {
        self.opens().iter().filter(|o| o.path == path).count()
    }

    /// Every reset, in order.
    pub fn resets(&self) -> Vec<Reset> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Reset(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    /// The bytes the client sent on stream `id` of connection `conn`.
    pub fn body(&self, conn: usize, id: u32) -> Vec<u8> {
        let mut body = Vec::new();
        for e in self.events() {
            match e {
                Event::Data {
                    conn: c,
                    id: i,
                    bytes,
                } if c == conn && i == id => body.extend_from_slice(&bytes),
                _ => {}
            }
        }
        body
    }

    /// How many non-empty DATA frames the client sent on the streams numbered `id` (h2 hands the server
    /// each DATA frame's payload as one chunk).
    pub fn data_frames_of_id(&self, id: u32) -> usize {
        self.events()
            .iter()
            .filter(
                |e| matches!(e, Event::Data { id: i, bytes, .. } if *i == id && !bytes.is_empty()),
            )
            .count()
    }

    /// The bytes the client sent on the streams numbered `id`, whatever their connection, and how many
    /// END_STREAMs it sent there (for tests whose calls share one connection).
    pub fn body_of_id(&self, id: u32) -> (Vec<u8>, usize) {
        let mut body = Vec::new();
        let mut ends = 0;
        for e in self.events() {
            match e {
                Event::Data { id: i, bytes, .. } if i == id => body.extend_from_slice(&bytes),
                Event::End { id: i, .. } if i == id => ends += 1,
                _ => {}
            }
        }
        (body, ends)
    }
}

impl Stream {
    /// A request header.
    pub fn header(&self, name: &str) -> Option<String> {
        header(&self.headers, name)
    }

    /// The `grpc-previous-rpc-attempts` header, if any.
    pub fn previous_attempts(&self) -> Option<String> {
        self.header("grpc-previous-rpc-attempts")
    }

    /// `grpc-previous-rpc-attempts` as a number (0 when absent).
    pub fn prev(&self) -> u32 {
        self.previous_attempts()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Makes this stream's connection start a graceful shutdown (GOAWAY); the stream itself may still
    /// answer.
    pub fn goaway_connection(&self) {
        self.goaway.notify_one();
    }

    /// Logs END_STREAM on this stream.
    pub fn log_end(&self) {
        push(
            &self.log,
            Event::End {
                conn: self.conn,
                id: self.id,
            },
        );
    }

    /// Logs a reset of this stream.
    pub fn log_reset(&self, reason: Reason) {
        push(
            &self.log,
            Event::Reset(Reset {
                conn: self.conn,
                id: self.id,
                reason,
            }),
        );
    }

    /// Logs a stream error as a reset, and returns its reason.
    pub fn log_err(&self, e: &h2::Error) -> Reason {
        let reason = e.reason().unwrap_or(Reason::INTERNAL_ERROR);
        self.log_reset(reason);
        reason
    }

    fn log_data(&self, chunk: Bytes) {
        push(
            &self.log,
            Event::Data {
                conn: self.conn,
                id: self.id,
                bytes: chunk,
            },
        );
    }

    /// Reads DATA until END_STREAM (Ok) or a reset (Err), logging both; releases flow control.
    pub async fn read_to_end(&mut self) -> Result<(), Reason> {
        loop {
            match self.recv.data().await {
                Some(Ok(chunk)) => {
                    let _ = self.recv.flow_control().release_capacity(chunk.len());
                    self.log_data(chunk);
                }
                Some(Err(e)) => return Err(self.log_err(&e)),
                None => {
                    self.log_end();
                    return Ok(());
                }
            }
        }
    }

    /// Reads DATA until `n` bytes arrived (or the stream ended); logs them.
    pub async fn read_bytes(&mut self, n: usize) -> Result<(), Reason> {
        let mut got = 0;
        while got < n {
            match self.recv.data().await {
                Some(Ok(chunk)) => {
                    got += chunk.len();
                    let _ = self.recv.flow_control().release_capacity(chunk.len());
                    self.log_data(chunk);
                }
                Some(Err(e)) => return Err(self.log_err(&e)),
                None => {
                    self.log_end();
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Waits until the client resets the stream (before response headers), and logs it.
    pub async fn wait_reset(&mut self) {
        let respond = &mut self.respond;
        if let Ok(reason) = poll_fn(|cx| respond.poll_reset(cx)).await {
            self.log_reset(reason);
        }
    }

    /// Trailers-Only with `grpc-status: code` and extra headers.
    pub fn trailers_only(&mut self, code: &str, extra: &[(&str, &str)]) {
        let mut r = response_head();
        let h = r.headers_mut();
        h.insert("grpc-status", HeaderValue::from_str(code).expect("code"));
        for (k, v) in extra {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        let _ = self.respond.send_response(r, true);
    }

    /// Response headers only; the stream stays open.
    pub fn headers(&mut self) -> Option<SendStream<Bytes>> {
        self.respond.send_response(response_head(), false).ok()
    }

    /// Headers, one message, OK trailers.
    pub fn ok(&mut self, payload: &[u8]) {
        answer(&mut self.respond, payload);
    }
}

/// The head of a gRPC response: status 200, `content-type: application/grpc`.
pub fn response_head() -> http::Response<()> {
    let mut r = http::Response::new(());
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    r
}

/// Trailers with `grpc-status: code` and extra fields.
pub fn trailers(code: &str, extra: &[(&str, &str)]) -> HeaderMap {
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

/// Answers a call: response headers, one message with `payload`, OK trailers (whatever fails is ignored:
/// the client may be gone).
pub fn answer(respond: &mut SendResponse<Bytes>, payload: &[u8]) {
    if let Ok(mut send) = respond.send_response(response_head(), false) {
        let _ = send.send_data(grpc_message(payload), false);
        let _ = send.send_trailers(trailers("0", &[]));
    }
}
