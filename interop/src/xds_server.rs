//! A scriptable xDS management server for tests: the ADS service
//! (`envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources`, state of the world)
//! on tonic's HTTP/2 server, with envoy-types' generated messages. Another HTTP/2 stack than the channel's
//! own, so the channel's ADS client is proven against a server it does not share code with.
//!
//! Tests set the resources per type ([`ManagementServer::set`]); every change gets a new version and is
//! pushed to each stream subscribed to the type. Each request is recorded ([`ManagementServer::requests`]),
//! so tests can expect ACKs and NACKs, and streams are counted as they open and end. [`ManagementServer::stop`] and [`ManagementServer::restart`] (on the
//! same port) exercise the client's stream recovery. It listens on loopback TCP in plaintext
//! ([`ManagementServer::start`]), over TLS with or without a required client certificate
//! ([`ManagementServer::start_tls`], gRFC A65's secured server), or on a Unix-domain socket
//! ([`ManagementServer::start_unix`]).
//!
//! What it sends, per stream and type: after a request whose names differ from the last ones, or that is
//! not the ACK or NACK of the latest version, the current resources of the type among the names asked for
//! (for every type, only names the client asked for; a type's resources with no name asked are not sent).
//! A NACK of the latest version is not answered again. Not here: delta xDS, per-client snapshots.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use futures_core::Stream;
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};

/// The resources of one type, at one version.
#[derive(Clone, Debug, Default)]
struct TypeSnapshot {
    version: u64,
    resources: BTreeMap<String, Any>,
}

#[derive(Default)]
struct State {
    types: BTreeMap<String, TypeSnapshot>,
    requests: Vec<DiscoveryRequest>,
    streams_opened: u64,
    /// Streams that ended (the client went away or ended them, or the server stopped).
    streams_ended: u64,
}

struct Shared {
    state: Mutex<State>,
    /// Bumped on every change, so streams re-check what to send.
    changes: watch::Sender<u64>,
    /// Bumped by [`ManagementServer::stop`]: open streams end.
    stops: watch::Sender<u64>,
}

/// A running management server (see the module docs).
pub struct ManagementServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    /// How it listens: plaintext TCP, TLS over TCP, or a Unix socket.
    mode: Mode,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// The task that owns the listener: `stop` waits for it to end, so the port is free for `restart`.
    accepting: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for ManagementServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagementServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl ManagementServer {
    /// Starts a server on a free loopback port.
    pub async fn start() -> std::io::Result<ManagementServer> {
        ManagementServer::start_on(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts a server on `addr` (port 0: a free one).
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<ManagementServer> {
        ManagementServer::start_with(addr, Mode::Plain).await
    }

    /// Starts a server on a free loopback port that speaks TLS only (ALPN `h2`), presenting `identity`
    /// and, with `client_ca`, requiring a client certificate signed by it (mTLS; gRFC A65's server).
    pub async fn start_tls(
        identity: &crate::tls::CertifiedPem,
        client_ca: Option<&str>,
    ) -> std::io::Result<ManagementServer> {
        let config = crate::tls::server_config(identity, &[b"h2"], client_ca)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let mode = Mode::Tls(tokio_rustls::TlsAcceptor::from(config));
        ManagementServer::start_with(SocketAddr::from(([127, 0, 0, 1], 0)), mode).await
    }

    /// Starts a server on the Unix-domain socket `path` (plaintext; Istio's local agent), named
    /// `unix:<path>` by [`ManagementServer::server_uri`]. A file left at `path` is replaced.
    #[cfg(unix)]
    pub async fn start_unix(path: &std::path::Path) -> std::io::Result<ManagementServer> {
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        ManagementServer::start_with(unspecified, Mode::Unix(path.to_owned())).await
    }

    /// Starts a server on the socket `name` in Linux's abstract namespace (plaintext), named
    /// `unix-abstract:<name>` by [`ManagementServer::server_uri`].
    #[cfg(target_os = "linux")]
    pub async fn start_unix_abstract(name: &str) -> std::io::Result<ManagementServer> {
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        ManagementServer::start_with(unspecified, Mode::UnixAbstract(name.to_owned())).await
    }

    async fn start_with(addr: SocketAddr, mode: Mode) -> std::io::Result<ManagementServer> {
        let (changes, _) = watch::channel(0);
        let (stops, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changes,
            stops,
        });
        let mut server = ManagementServer {
            shared,
            addr,
            mode,
            stop: None,
            task: None,
            accepting: None,
        };
        server.listen().await?;
        Ok(server)
    }

    /// Binds (the same address again after a stop) and serves.
    async fn listen(&mut self) -> std::io::Result<()> {
        let listener = match &self.mode {
            #[cfg(unix)]
            Mode::Unix(path) => {
                let _ = std::fs::remove_file(path);
                Listener::Unix(tokio::net::UnixListener::bind(path)?)
            }
            #[cfg(target_os = "linux")]
            Mode::UnixAbstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
                let std = std::os::unix::net::UnixListener::bind_addr(&addr)?;
                std.set_nonblocking(true)?;
                Listener::Unix(tokio::net::UnixListener::from_std(std)?)
            }
            Mode::Plain | Mode::Tls(_) => {
                let listener = tokio::net::TcpListener::bind(self.addr).await?;
                self.addr = listener.local_addr()?;
                Listener::Tcp(listener)
            }
        };
        let tls = match &self.mode {
            Mode::Tls(acceptor) => Some(acceptor.clone()),
            _ => None,
        };
        self.serve(listener, tls);
        Ok(())
    }

    fn serve(&mut self, listener: Listener, tls: Option<tokio_rustls::TlsAcceptor>) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = AggregatedDiscoveryServiceServer::new(Ads {
            shared: self.shared.clone(),
        });
        let (connections, incoming) = mpsc::unbounded_channel();
        self.accepting = Some(tokio::spawn(accept(listener, tls, connections)));
        let incoming = tokio_stream::wrappers::UnboundedReceiverStream::new(incoming);
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        self.stop = Some(stop);
        self.task = Some(task);
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The target a bootstrap's `server_uri` names it by.
    pub fn server_uri(&self) -> String {
        match &self.mode {
            #[cfg(unix)]
            Mode::Unix(path) => format!("unix:{}", path.display()),
            #[cfg(target_os = "linux")]
            Mode::UnixAbstract(name) => format!("unix-abstract:{name}"),
            Mode::Plain | Mode::Tls(_) => format!("{}", self.addr),
        }
    }

    /// A bootstrap JSON naming this server (insecure credentials) and a node id.
    pub fn bootstrap_json(&self) -> String {
        format!(
            r#"{{"xds_servers":[{{"server_uri":"{}","channel_creds":[{{"type":"insecure"}}],"server_features":["xds_v3"]}}],"node":{{"id":"test-node","locality":{{"zone":"z1"}}}}}}"#,
            self.server_uri()
        )
    }

    /// Sets every resource of `type_url` (replacing the previous set) under a new version, and pushes it to
    /// the streams that asked for the type.
    pub fn set(&self, type_url: &str, resources: Vec<(String, Any)>) {
        {
            let mut state = self.shared.state.lock();
            let snapshot = state.types.entry(type_url.to_owned()).or_default();
            snapshot.version += 1;
            snapshot.resources = resources.into_iter().collect();
        }
        self.shared.changes.send_modify(|c| *c += 1);
    }

    /// Every request received so far, in order (all streams).
    pub fn requests(&self) -> Vec<DiscoveryRequest> {
        self.shared.state.lock().requests.clone()
    }

    /// The requests received after the first `skip` ones, in order (all streams): for following them.
    pub fn requests_after(&self, skip: usize) -> Vec<DiscoveryRequest> {
        self.shared
            .state
            .lock()
            .requests
            .iter()
            .skip(skip)
            .cloned()
            .collect()
    }

    /// How many ADS streams were opened so far.
    pub fn streams_opened(&self) -> u64 {
        self.shared.state.lock().streams_opened
    }

    /// How many ADS streams ended so far (the client ended them or went away, or the server stopped).
    pub fn streams_ended(&self) -> u64 {
        self.shared.state.lock().streams_ended
    }

    /// Waits (up to `limit`, polling every 10 ms) until some request satisfies `what`; returns it.
    pub async fn wait_for_request(
        &self,
        limit: Duration,
        what: impl Fn(&DiscoveryRequest) -> bool,
    ) -> Option<DiscoveryRequest> {
        let rounds = (limit.as_millis() / 10).max(1);
        for _ in 0..rounds {
            if let Some(r) = self.requests().into_iter().find(|r| what(r)) {
                return Some(r);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }

    /// Stops serving: open streams end and the port is closed.
    pub async fn stop(&mut self) {
        self.shared.stops.send_modify(|s| *s += 1);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        // Awaiting the aborted task returns once its listener is dropped (closed).
        if let Some(accepting) = self.accepting.take() {
            accepting.abort();
            let _ = accepting.await;
        }
    }

    /// Serves again on the same port, with the same resources.
    pub async fn restart(&mut self) -> std::io::Result<()> {
        self.stop().await;
        self.listen().await
    }
}

impl Drop for ManagementServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if let Some(accepting) = self.accepting.take() {
            accepting.abort();
        }
    }
}

struct Ads {
    shared: Arc<Shared>,
}

/// How a [`ManagementServer`] listens.
enum Mode {
    /// Plaintext TCP.
    Plain,
    /// TLS over TCP.
    Tls(tokio_rustls::TlsAcceptor),
    /// A Unix-domain socket at this path.
    #[cfg(unix)]
    Unix(std::path::PathBuf),
    /// A socket of this name in Linux's abstract namespace.
    #[cfg(target_os = "linux")]
    UnixAbstract(String),
}

/// A bound listener.
enum Listener {
    Tcp(tokio::net::TcpListener),
    #[cfg(unix)]
    Unix(tokio::net::UnixListener),
}

/// How long a client gets to finish its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts connections (TLS handshakes on their own tasks, bounded in time) and hands them to the server.
async fn accept(
    listener: Listener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    connections: mpsc::UnboundedSender<std::io::Result<Connection>>,
) {
    loop {
        let connection = match &listener {
            Listener::Tcp(listener) => match listener.accept().await {
                Ok((tcp, _)) => {
                    let _ = tcp.set_nodelay(true);
                    match &tls {
                        None => Connection::Tcp(tcp),
                        Some(acceptor) => {
                            let (acceptor, connections) = (acceptor.clone(), connections.clone());
                            tokio::spawn(async move {
                                let handshake = tokio::time::timeout(
                                    TLS_HANDSHAKE_TIMEOUT,
                                    acceptor.accept(tcp),
                                );
                                // A failed handshake (no client certificate) just closes the connection.
                                if let Ok(Ok(stream)) = handshake.await {
                                    let _ = connections.send(Ok(Connection::Tls(Box::new(stream))));
                                }
                            });
                            continue;
                        }
                    }
                }
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            #[cfg(unix)]
            Listener::Unix(listener) => match listener.accept().await {
                Ok((unix, _)) => Connection::Unix(unix),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        if connections.send(Ok(connection)).is_err() {
            return;
        }
    }
}

/// Aborts a task when dropped.
/// One accepted connection.
enum Connection {
    Tcp(tokio::net::TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>),
    #[cfg(unix)]
    Unix(tokio::net::UnixStream),
}

impl tonic::transport::server::Connected for Connection {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl tokio::io::AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Connection::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Connection::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
            #[cfg(unix)]
            Connection::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Connection::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Connection::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
            #[cfg(unix)]
            Connection::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Connection::Tcp(s) => Pin::new(s).poll_flush(cx),
            Connection::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
            #[cfg(unix)]
            Connection::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Connection::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Connection::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
            #[cfg(unix)]
            Connection::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Counts a stream's end when its task ends, however it ends.
struct StreamEnd(Arc<Shared>);

impl Drop for StreamEnd {
    fn drop(&mut self) {
        self.0.state.lock().streams_ended += 1;
    }
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, tonic::Status>> + Send>>;

/// What one stream asked for, per type, and what it was last sent.
#[derive(Default)]
struct Subscription {
    names: BTreeSet<String>,
    /// (version, nonce) of the last response sent.
    sent: Option<(u64, String)>,
    /// The version the client NACKed last (not resent).
    nacked: Option<u64>,
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = ResponseStream;
    type DeltaAggregatedResourcesStream =
        Pin<Box<dyn Stream<Item = Result<DeltaDiscoveryResponse, tonic::Status>> + Send>>;

    async fn stream_aggregated_resources(
        &self,
        request: tonic::Request<tonic::Streaming<DiscoveryRequest>>,
    ) -> Result<tonic::Response<ResponseStream>, tonic::Status> {
        let mut requests = request.into_inner();
        let shared = self.shared.clone();
        shared.state.lock().streams_opened += 1;
        let (tx, rx) = mpsc::channel::<Result<DiscoveryResponse, tonic::Status>>(16);
        tokio::spawn(async move {
            let _ended = StreamEnd(shared.clone());
            let mut subs: BTreeMap<String, Subscription> = BTreeMap::new();
            let mut changes = shared.changes.subscribe();
            let mut stops = shared.stops.subscribe();
            let mut nonce = 0u64;
            loop {
                tokio::select! {
                    next = requests.message() => {
                        let Ok(Some(req)) = next else { return };
                        shared.state.lock().requests.push(req.clone());
                        let sub = subs.entry(req.type_url.clone()).or_default();
                        let names: BTreeSet<String> = req.resource_names.iter().cloned().collect();
                        let is_answer = sub
                            .sent
                            .as_ref()
                            .is_some_and(|(_, n)| *n == req.response_nonce);
                        if is_answer && req.error_detail.is_some() {
                            sub.nacked = sub.sent.as_ref().map(|(v, _)| *v);
                        }
                        let names_changed = names != sub.names;
                        sub.names = names;
                        if names_changed || !is_answer {
                            sub.sent = None;
                            sub.nacked = None;
                        }
                    }
                    changed = changes.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                    _ = stops.changed() => {
                        let _ = tx.send(Err(tonic::Status::unavailable("the management server stopped"))).await;
                        return;
                    }
                }
                // Send what is due.
                let due: Vec<DiscoveryResponse> = {
                    let state = shared.state.lock();
                    let mut due = Vec::new();
                    for (type_url, sub) in subs.iter_mut() {
                        let Some(snapshot) = state.types.get(type_url) else {
                            continue;
                        };
                        let current = sub.sent.as_ref().map(|(v, _)| *v);
                        if current == Some(snapshot.version) || sub.nacked == Some(snapshot.version)
                        {
                            continue;
                        }
                        if sub.names.is_empty() {
                            continue;
                        }
                        nonce += 1;
                        let resources: Vec<Any> = snapshot
                            .resources
                            .iter()
                            .filter(|(name, _)| sub.names.contains(*name))
                            .map(|(_, any)| any.clone())
                            .collect();
                        sub.sent = Some((snapshot.version, nonce.to_string()));
                        due.push(DiscoveryResponse {
                            version_info: snapshot.version.to_string(),
                            resources,
                            type_url: type_url.clone(),
                            nonce: nonce.to_string(),
                            ..Default::default()
                        });
                    }
                    due
                };
                for response in due {
                    if tx.send(Ok(response)).await.is_err() {
                        return;
                    }
                }
            }
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        Ok(tonic::Response::new(Box::pin(stream)))
    }

    async fn delta_aggregated_resources(
        &self,
        _request: tonic::Request<tonic::Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::DeltaAggregatedResourcesStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("delta xDS is not served"))
    }
}
