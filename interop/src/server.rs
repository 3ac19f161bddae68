//! The interop server: `grpc.testing.TestService` on h2's server API, with every server behaviour in
//! `shared/spec/interop.md` (echo status and metadata, also on errors; `interval_us`; exact per-message
//! compression checks, which only a server that reads frames itself can make; HalfDuplexCall;
//! UnimplementedCall left unimplemented). It also serves the exactly-once counter of [`crate::counter`]
//! (`/exactly_once.Counter/Increment`, one result tracker per process) and, unless
//! [`ServerOptions::without_health_service`] says otherwise, the standard health service
//! (`grpc.health.v1.Health`, [`crate::health`]), whose statuses [`ServerHandle::health`] sets.
//!
//! With a [`PeerLog`] ([`ServerOptions::peer_log`]) it records every connection it accepts (after the TLS
//! handshake, with the SANs of the client certificate presented, see [`crate::tls::certificate_sans`]) and
//! counts the calls it receives, so that mTLS tests can check which identity new connections present and
//! that no call reached a server a client must not talk to.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{timeout, Code, Status};
use interop_proto::{
    paths, Empty, Payload, SimpleRequest, SimpleResponse, StreamingInputCallRequest,
    StreamingInputCallResponse, StreamingOutputCallRequest, StreamingOutputCallResponse,
};
use prost::Message;
use tokio::net::TcpListener;

use crate::health::HealthStatuses;
use crate::server_call::{decode_error, h2_server_builder, read_one, send, ServerCall};
use crate::tls::{certificate_sans, CertSan};

const ECHO_INITIAL: &str = "x-grpc-test-echo-initial";
const ECHO_TRAILING: &str = "x-grpc-test-echo-trailing-bin";

/// Binds `addr` and serves the interop service on it in the background for good; returns the bound address.
/// It serves the health service with the default statuses (the server SERVING), which nothing can change.
pub async fn spawn(addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(serve(listener));
    Ok(local)
}

/// A server running in the background; [`ServerHandle::shutdown`] (or dropping the handle) stops it and
/// closes every connection, like a killed process.
pub struct ServerHandle {
    /// Where it listens.
    pub addr: SocketAddr,
    tasks: tokio::task::JoinSet<()>,
    stop: tokio::sync::watch::Sender<bool>,
    health: HealthStatuses,
}

impl ServerHandle {
    /// The statuses its health service reports; a clone shares them. With
    /// [`ServerOptions::without_health_service`] nothing serves them.
    pub fn health(&self) -> &HealthStatuses {
        &self.health
    }

    /// Stops the server: the listener and every connection close at once.
    pub fn shutdown(mut self) {
        let _ = self.stop.send(true);
        self.tasks.abort_all();
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.tasks.abort_all();
    }
}

/// One connection a server accepted, as its [`PeerLog`] records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerConnection {
    /// The client's address.
    pub peer: SocketAddr,
    /// Whether the connection is TLS.
    pub tls: bool,
    /// The SANs of the client certificate presented (empty without one, or without TLS).
    pub client_sans: Vec<CertSan>,
}

impl PeerConnection {
    /// The URI SANs (SPIFFE IDs) of the client certificate.
    pub fn client_uris(&self) -> Vec<String> {
        self.client_sans
            .iter()
            .filter_map(|s| s.uri().map(str::to_owned))
            .collect()
    }
}

#[derive(Debug, Default)]
struct PeerLogState {
    connections: Vec<PeerConnection>,
    handshake_failures: u64,
    calls: u64,
}

/// What a server saw of its clients: each accepted connection with the client certificate's SANs, failed
/// TLS handshakes, and the number of calls received. A clone shares the log.
#[derive(Clone, Debug, Default)]
pub struct PeerLog {
    state: Arc<parking_lot::Mutex<PeerLogState>>,
    changed: Arc<tokio::sync::Notify>,
}

impl PeerLog {
    /// An empty log.
    pub fn new() -> PeerLog {
        PeerLog::default()
    }

    /// Every connection accepted so far, in order.
    pub fn connections(&self) -> Vec<PeerConnection> {
        self.state.lock().connections.clone()
    }

    /// TLS handshakes that failed or timed out.
    pub fn handshake_failures(&self) -> u64 {
        self.state.lock().handshake_failures
    }

    /// Calls received (every method, whatever their outcome).
    pub fn calls(&self) -> u64 {
        self.state.lock().calls
    }

    /// Waits at most `limit` for a connection `accept` accepts; `None` when none came.
    pub async fn wait_for_connection(
        &self,
        limit: Duration,
        accept: impl Fn(&PeerConnection) -> bool,
    ) -> Option<PeerConnection> {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                if let Some(c) = self.connections().into_iter().find(|c| accept(c)) {
                    return c;
                }
                changed.await;
            }
        };
        tokio::time::timeout(limit, wait).await.ok()
    }

    fn connected(&self, connection: PeerConnection) {
        self.state.lock().connections.push(connection);
        self.changed.notify_waiters();
    }

    fn handshake_failed(&self) {
        self.state.lock().handshake_failures += 1;
        self.changed.notify_waiters();
    }

    fn called(&self) {
        self.state.lock().calls += 1;
        self.changed.notify_waiters();
    }
}

/// How [`start_with`] runs a server. The default: plaintext, with the health service and fresh statuses
/// (the server as a whole SERVING).
#[derive(Clone, Debug, Default)]
pub struct ServerOptions {
    tls: Option<Arc<rustls::ServerConfig>>,
    health: HealthStatuses,
    without_health: bool,
    unary_failure: Option<Status>,
    peer_log: Option<PeerLog>,
}

impl ServerOptions {
    /// The default options.
    pub fn new() -> ServerOptions {
        ServerOptions::default()
    }

    /// Serves over TLS with `config` (which should offer ALPN `h2`; see [`crate::tls`]).
    pub fn tls(mut self, config: Arc<rustls::ServerConfig>) -> ServerOptions {
        self.tls = Some(config);
        self
    }

    /// Serves these health statuses (so that several servers can share them) instead of fresh ones.
    pub fn health_statuses(mut self, statuses: HealthStatuses) -> ServerOptions {
        self.health = statuses;
        self
    }

    /// Leaves the health service out: its methods answer UNIMPLEMENTED, like a server that never had one.
    pub fn without_health_service(mut self) -> ServerOptions {
        self.without_health = true;
        self
    }

    /// Records the connections and calls in `log` (see [`PeerLog`]).
    pub fn peer_log(mut self, log: PeerLog) -> ServerOptions {
        self.peer_log = Some(log);
        self
    }

    /// Makes every `UnaryCall` fail with `status` (a sick backend, for load-balancing tests); the other
    /// methods are unchanged.
    pub fn fail_unary_calls(mut self, status: Status) -> ServerOptions {
        self.unary_failure = Some(status);
        self
    }
}

/// Binds `addr` and serves the interop service until the returned handle is shut down or dropped. The
/// server answers `fill_server_id` with its listening address.
pub async fn start(addr: SocketAddr) -> std::io::Result<ServerHandle> {
    start_with(addr, ServerOptions::new()).await
}

/// Like [`start`], over TLS with `config` (which should offer ALPN `h2`; see [`crate::tls`]).
pub async fn start_tls(
    addr: SocketAddr,
    config: Arc<rustls::ServerConfig>,
) -> std::io::Result<ServerHandle> {
    start_with(addr, ServerOptions::new().tls(config)).await
}

/// Like [`start`], with `options`.
pub async fn start_with(addr: SocketAddr, options: ServerOptions) -> std::io::Result<ServerHandle> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let acceptor = options.tls.map(tokio_rustls::TlsAcceptor::from);
    let served = (!options.without_health).then(|| options.health.clone());
    tasks.spawn(serve_until(
        listener,
        acceptor,
        Served {
            server_id: Arc::from(""),
            health: served,
            unary_failure: options.unary_failure,
            peer_log: options.peer_log,
        },
        stopped,
    ));
    Ok(ServerHandle {
        addr: local,
        tasks,
        stop,
        health: options.health,
    })
}

/// Serves the interop service on `listener` until the task is dropped (with the health service and the
/// default statuses).
pub async fn serve(listener: TcpListener) {
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    serve_until(listener, None, Served::plain(), stopped).await;
}

/// Serves the interop service over TLS on `listener` until the task is dropped (with the health service and
/// the default statuses).
pub async fn serve_tls(listener: TcpListener, config: Arc<rustls::ServerConfig>) {
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    serve_until(listener, Some(acceptor), Served::plain(), stopped).await;
}

/// What every call of one server shares.
struct Served {
    /// What `fill_server_id` answers.
    server_id: Arc<str>,
    /// The health statuses, `None` without the health service.
    health: Option<HealthStatuses>,
    /// What every `UnaryCall` fails with, if it does.
    unary_failure: Option<Status>,
    /// Where connections and calls are recorded, if anywhere.
    peer_log: Option<PeerLog>,
}

impl Served {
    /// The health service with the default statuses, nothing else.
    fn plain() -> Served {
        Served {
            server_id: Arc::from(""),
            health: Some(HealthStatuses::new()),
            unary_failure: None,
            peer_log: None,
        }
    }
}

/// How long a client gets to finish its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

async fn serve_until(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut served: Served,
    stopped: tokio::sync::watch::Receiver<bool>,
) {
    served.server_id = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default()
        .into();
    let served = Arc::new(served);
    loop {
        let Ok((tcp, peer)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (served, stopped) = (served.clone(), stopped.clone());
        match &tls {
            None => {
                if let Some(log) = &served.peer_log {
                    log.connected(PeerConnection {
                        peer,
                        tls: false,
                        client_sans: Vec::new(),
                    });
                }
                tokio::spawn(serve_connection(tcp, peer, served, stopped));
            }
            Some(acceptor) => {
                let accept = acceptor.accept(tcp);
                tokio::spawn(async move {
                    let failed = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, accept).await {
                        Ok(Ok(io)) => {
                            if let Some(log) = &served.peer_log {
                                let client_sans = io
                                    .get_ref()
                                    .1
                                    .peer_certificates()
                                    .and_then(|chain| chain.first())
                                    .and_then(|leaf| certificate_sans(leaf).ok())
                                    .unwrap_or_default();
                                log.connected(PeerConnection {
                                    peer,
                                    tls: true,
                                    client_sans,
                                });
                            }
                            serve_connection(io, peer, served, stopped).await;
                            return;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            served
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            served
                        }
                    };
                    if let Some(log) = &failed.peer_log {
                        log.handshake_failed();
                    }
                });
            }
        }
    }
}

/// Serves the interop service on a Unix socket until the task is dropped (with the health service and the
/// default statuses).
pub async fn serve_unix(listener: tokio::net::UnixListener) {
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let served = Arc::new(Served {
        server_id: "unix".into(),
        ..Served::plain()
    });
    let peer = SocketAddr::from(([0, 0, 0, 0], 0));
    loop {
        let Ok((io, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(serve_connection(io, peer, served.clone(), stopped.clone()));
    }
}

async fn serve_connection<T>(
    io: T,
    peer: SocketAddr,
    served: Arc<Served>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Ok(mut conn) = h2_server_builder().handshake::<_, Bytes>(io).await else {
        return;
    };
    let mut calls = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            next = conn.accept() => match next {
                Some(Ok((request, respond))) => {
                    if let Some(log) = &served.peer_log {
                        log.called();
                    }
                    let call = ServerCall::new(request, respond, peer);
                    calls.spawn(handle(call, served.clone()));
                }
                _ => return,
            },
            // The server was stopped: drop the connection (and its calls) like a killed process.
            _ = stopped.wait_for(|s| *s) => return,
        }
    }
}

async fn handle(mut call: ServerCall, served: Arc<Served>) {
    // The exactly-once counter (`crate::counter`), with one result tracker per server process.
    if call.path == crate::counter::INCREMENT {
        static COUNTER: std::sync::OnceLock<crate::counter::Shared> = std::sync::OnceLock::new();
        let shared = COUNTER
            .get_or_init(|| {
                crate::counter::Shared::new(Some(grpc_exactly_once::ResultTracker::new(
                    grpc_exactly_once::Config::default(),
                    Bytes::len,
                )))
            })
            .clone();
        crate::counter::serve(call, shared).await;
        return;
    }
    let deadline = call
        .request_headers
        .get("grpc-timeout")
        .and_then(|v| timeout::decode(v.as_bytes()));
    // Echo metadata, also on errors.
    if let Some(v) = call.request_headers.get(ECHO_INITIAL).cloned() {
        call.initial_metadata.insert(ECHO_INITIAL, v);
    }
    if let Some(v) = call.request_headers.get(ECHO_TRAILING).cloned() {
        call.trailing_metadata.insert(ECHO_TRAILING, v);
    }
    let result = match deadline {
        Some(d) => match tokio::time::timeout(d, dispatch(&mut call, &served)).await {
            Ok(r) => r,
            Err(_) => Err(Status::new(
                Code::DeadlineExceeded,
                "deadline exceeded on the server",
            )),
        },
        None => dispatch(&mut call, &served).await,
    };
    // Answers queued before a failure go out before its status (not past the deadline: the client is
    // gone, and a flush could wait for its flow control).
    let result = match result {
        Ok(()) => call.flush().await,
        Err(status) if status.code() == Code::DeadlineExceeded => Err(status),
        Err(status) => {
            let _ = call.flush().await;
            Err(status)
        }
    };
    match result {
        Ok(()) => call.finish(&Status::new(Code::Ok, "")),
        Err(status) => call.finish(&status),
    }
}

async fn dispatch(call: &mut ServerCall, served: &Served) -> Result<(), Status> {
    if let Some(enc) = call.unsupported_request_encoding() {
        return Err(Status::new(
            Code::Unimplemented,
            format!("unsupported grpc-encoding {enc:?}"),
        ));
    }
    let path = call.path.clone();
    // Without the health service its methods fall through to UNIMPLEMENTED.
    if let Some(health) = &served.health {
        match path.as_str() {
            paths::HEALTH_CHECK => return crate::health::check(call, health).await,
            paths::HEALTH_WATCH => return crate::health::watch(call, health).await,
            _ => {}
        }
    }
    match path.as_str() {
        paths::EMPTY_CALL => {
            let _: Empty = read_one(call).await?;
            send(call, &Empty {}, false).await
        }
        paths::UNARY_CALL => match &served.unary_failure {
            Some(status) => {
                let _: SimpleRequest = read_one(call).await?;
                Err(status.clone())
            }
            None => unary_call(call, &served.server_id).await,
        },
        paths::CACHEABLE_UNARY_CALL => {
            let _: SimpleRequest = read_one(call).await?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos();
            call.initial_metadata.insert(
                "cache-control",
                http::HeaderValue::from_static("max-age=60, public"),
            );
            let body = Bytes::from(now.to_string());
            let resp = SimpleResponse {
                payload: Some(Payload { r#type: 0, body }),
                ..Default::default()
            };
            send(call, &resp, false).await
        }
        paths::STREAMING_OUTPUT_CALL => {
            let req: StreamingOutputCallRequest = read_one(call).await?;
            stream_responses(call, &req, Delivery::Each).await?;
            echo_status(req.response_status.as_ref())
        }
        paths::STREAMING_INPUT_CALL => {
            let mut total = 0usize;
            while let Some(msg) = call.next_message().await? {
                let req = StreamingInputCallRequest::decode(msg.payload).map_err(decode_error)?;
                check_compressed(
                    req.expect_compressed.as_ref().map(|b| b.value),
                    msg.compressed,
                )?;
                total += req.payload.map_or(0, |p| p.body.len());
            }
            let aggregated_payload_size = i32::try_from(total).unwrap_or(i32::MAX);
            send(
                call,
                &StreamingInputCallResponse {
                    aggregated_payload_size,
                },
                false,
            )
            .await
        }
        paths::FULL_DUPLEX_CALL => {
            // The answers to requests that arrived together leave together (`queue_message`).
            while let Some(msg) = call.next_message().await? {
                let req = StreamingOutputCallRequest::decode(msg.payload).map_err(decode_error)?;
                echo_status(req.response_status.as_ref())?;
                stream_responses(call, &req, Delivery::Batched).await?;
            }
            call.flush().await
        }
        paths::HALF_DUPLEX_CALL => {
            let mut requests = Vec::new();
            while let Some(msg) = call.next_message().await? {
                requests
                    .push(StreamingOutputCallRequest::decode(msg.payload).map_err(decode_error)?);
            }
            for req in &requests {
                echo_status(req.response_status.as_ref())?;
                stream_responses(call, req, Delivery::Each).await?;
            }
            Ok(())
        }
        other => Err(Status::new(
            Code::Unimplemented,
            format!("method {other} is not implemented"),
        )),
    }
}

async fn unary_call(call: &mut ServerCall, server_id: &str) -> Result<(), Status> {
    let msg = call
        .next_message()
        .await?
        .ok_or_else(|| Status::new(Code::Unimplemented, "expected one request message"))?;
    let req = SimpleRequest::decode(msg.payload).map_err(decode_error)?;
    check_compressed(
        req.expect_compressed.as_ref().map(|b| b.value),
        msg.compressed,
    )?;
    echo_status(req.response_status.as_ref())?;
    if req.response_type != 0 {
        return Err(Status::new(
            Code::InvalidArgument,
            "unsupported response_type",
        ));
    }
    let size = usize::try_from(req.response_size)
        .map_err(|_| Status::new(Code::InvalidArgument, "negative response_size"))?;
    let resp = SimpleResponse {
        payload: Some(Payload {
            r#type: 0,
            body: Bytes::from(vec![0u8; size]),
        }),
        server_id: if req.fill_server_id {
            server_id.to_owned()
        } else {
            String::new()
        },
        ..Default::default()
    };
    let compress = req.response_compressed.is_some_and(|b| b.value);
    send(call, &resp, compress).await
}

/// How [`stream_responses`] writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Delivery {
    /// Each message as it is made.
    Each,
    /// Queued with the other answers ready together (written before a pause, and when the call waits).
    Batched,
}

async fn stream_responses(
    call: &mut ServerCall,
    req: &StreamingOutputCallRequest,
    delivery: Delivery,
) -> Result<(), Status> {
    for params in &req.response_parameters {
        if params.interval_us > 0 {
            call.flush().await?;
            tokio::time::sleep(Duration::from_micros(params.interval_us as u64)).await;
        }
        let size = usize::try_from(params.size)
            .map_err(|_| Status::new(Code::InvalidArgument, "negative size"))?;
        let peer_socket_address = if params.fill_peer_socket_address.is_some_and(|b| b.value) {
            call.peer.to_string()
        } else {
            String::new()
        };
        let resp = StreamingOutputCallResponse {
            payload: Some(Payload {
                r#type: 0,
                body: Bytes::from(vec![0u8; size]),
            }),
            peer_socket_address,
        };
        let compress = params.compressed.is_some_and(|b| b.value);
        match delivery {
            Delivery::Each => send(call, &resp, compress).await?,
            Delivery::Batched => call.queue_message(&resp.encode_to_vec(), compress).await?,
        }
    }
    Ok(())
}

/// The exact CompressedRequest check: `expect_compressed` true needs a compressed message, and (as the C++
/// reference server does) false needs an uncompressed one.
fn check_compressed(expect: Option<bool>, compressed: bool) -> Result<(), Status> {
    match expect {
        Some(true) if !compressed => Err(Status::new(
            Code::InvalidArgument,
            "expected a compressed request message, got an uncompressed one",
        )),
        Some(false) if compressed => Err(Status::new(
            Code::InvalidArgument,
            "expected an uncompressed request message, got a compressed one",
        )),
        _ => Ok(()),
    }
}

fn echo_status(status: Option<&interop_proto::EchoStatus>) -> Result<(), Status> {
    match status {
        Some(s) if s.code != 0 => {
            let code = Code::from_i32(s.code).unwrap_or(Code::Unknown);
            Err(Status::new(code, s.message.clone()))
        }
        _ => Ok(()),
    }
}
