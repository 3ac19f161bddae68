//! Connection setup, the one path every subchannel connection takes: the socket (TCP with TCP_NODELAY and
//! kernel keepalive; to an HTTP CONNECT proxy and through its tunnel when the channel's [`Route`] says so,
//! gRFC A1; a host-name address without a proxy is looked up here with the system's resolver and its
//! addresses tried in order, within the attempt's deadline), TLS when the channel has it (for the target's name, inside the tunnel), the HTTP/2 handshake with prior knowledge, a task that
//! drives the connection, and a PING whose answer proves the server's SETTINGS arrived (READY). A server
//! that answers and sends GOAWAY before that PING comes back gave no usable connection: a failure (with
//! backoff), named as such.
//!
//! HTTP/2 settings, chosen deliberately (see [`Http2Settings`]):
//! * stream window 1 MiB: a 4 MiB message needs four window updates, and one call cannot take the whole
//!   connection;
//! * connection window 16 MiB: sixteen streams can be at full stream window at once;
//! * DATA-frame budget 8 MiB: h2 (0.4.16+) charges every unread DATA frame under 256 bytes that does not end a
//!   stream, which is every small gRPC message; with h2's default (half the connection window, at least
//!   25,600 bytes) about a hundred concurrent small responses would make h2 close the connection with
//!   `too_many_data_frames`. 8 MiB allows over 32,000 unread small frames;
//! * max frame size 16 KiB (the HTTP/2 default, which every server accepts), header list 16 KiB.
//!
//! Not here: what happens once the connection is READY (the control plane watches it for its close, a GOAWAY
//! or unanswered keepalive PINGs), and connection backoff (grpc-lb).

use grpc_lb::Address;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::conn::keepalive::TCP_KEEPALIVE;
use crate::conn::proxy::{self, Route};
use crate::conn::sniff::{Seen, Sniffer};
use crate::conn::tls::{self, Handshake, TlsConnector};
use crate::wire::status::{Code, Status};

/// HTTP/2 settings of the channel's connections. Start from the defaults and change what you need (more
/// settings may come, so the struct cannot be built field by field):
///
/// ```
/// let mut settings = grpc_channel::Http2Settings::default();
/// settings.stream_window = 4 << 20;
/// let channel = grpc_channel::Channel::builder("localhost:50051").http2_settings(settings);
/// # let _ = channel;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Http2Settings {
    /// SETTINGS_INITIAL_WINDOW_SIZE: how much one stream may receive before the client reads it.
    #[doc(alias = "initial_stream_window_size")]
    pub stream_window: u32,
    /// The connection-level receive window.
    #[doc(alias = "initial_connection_window_size")]
    pub connection_window: u32,
    /// h2's budget for unread small DATA frames (see the module docs).
    pub data_frame_budget: usize,
    /// SETTINGS_MAX_FRAME_SIZE.
    pub max_frame_size: u32,
    /// The largest response header list (headers or trailers, RFC 7541 sizes) a call accepts; a larger one
    /// ends the call RESOURCE_EXHAUSTED, with a message naming this limit. 16 KiB by default.
    ///
    /// tonic's `Endpoint::http2_max_header_list_size` is the nearest equivalent, not the same: tonic
    /// advertises its value in SETTINGS_MAX_HEADER_LIST_SIZE and leaves enforcing it to h2, while this
    /// channel advertises 16 times this value (so that a block moderately over it still arrives whole,
    /// instead of h2's protocol error) and enforces this value itself, per call. A server that sizes
    /// what it sends by the advertised setting therefore may send up to 16 times this limit, and the call
    /// then ends RESOURCE_EXHAUSTED here rather than failing on the server.
    #[doc(alias = "http2_max_header_list_size")]
    pub max_header_list_size: u32,
    /// How long one connection attempt may take at least (MIN_CONNECT_TIMEOUT; see
    /// [`ChannelBuilder::connect_timeout`](crate::ChannelBuilder::connect_timeout)).
    pub connect_timeout: Duration,
    /// TCP_NODELAY on TCP connections (on by default).
    pub tcp_nodelay: bool,
    /// The kernel's TCP keepalive idle time and probe interval on TCP connections (60 s by default;
    /// `None` turns it off).
    pub tcp_keepalive: Option<Duration>,
}

impl Http2Settings {
    /// An h2 client builder with these settings.
    pub(crate) fn client_builder(&self) -> h2::client::Builder {
        let mut b = h2::client::Builder::new();
        b.initial_window_size(self.stream_window)
            .initial_connection_window_size(self.connection_window)
            .data_frame_budget(self.data_frame_budget)
            .max_frame_size(self.max_frame_size)
            // h2 gets 16 times the limit, which the channel enforces itself with a status that names
            // it; h2's own checks (a protocol error, then ENHANCE_YOUR_CALM at 4x its limit) say less.
            .max_header_list_size(self.max_header_list_size.saturating_mul(16))
            .enable_push(false);
        b
    }
}

impl Default for Http2Settings {
    fn default() -> Self {
        Http2Settings {
            stream_window: 1 << 20,
            connection_window: 16 << 20,
            data_frame_budget: 8 << 20,
            max_frame_size: 16 << 10,
            max_header_list_size: 16 << 10,
            connect_timeout: Duration::from_secs(20),
            tcp_nodelay: true,
            tcp_keepalive: Some(TCP_KEEPALIVE),
        }
    }
}

/// The `User-Agent` of CONNECT requests.
const PROXY_USER_AGENT: &str = concat!("grpc-channel/", env!("CARGO_PKG_VERSION"));

/// One connection attempt to `addr` (TCP, a Unix-domain socket, or a name a proxy resolves), through a
/// proxy when `route` says so, given up at `deadline`: READY, or why not.
pub(crate) async fn connect(
    addr: &Address,
    deadline: Instant,
    settings: &Http2Settings,
    tls: Option<&TlsConnector>,
    route: &Route,
) -> Result<Established, Status> {
    let proxy = match addr {
        Address::Tcp(addr) => route.proxy_for(addr),
        Address::Name { .. } => route.name_proxy(),
        Address::Unix(_) | Address::UnixAbstract(_) => None,
    };
    // Which step a timed-out attempt was in, for its status.
    let socket = match (addr, proxy) {
        (_, Some(_)) => "TCP connection to the proxy",
        (Address::Unix(_) | Address::UnixAbstract(_), None) => "Unix socket connection",
        (Address::Name { .. }, None) => "name lookup and TCP connection",
        _ => "TCP connection",
    };
    let phases = [
        socket,
        "proxy's CONNECT",
        "TLS handshake",
        "HTTP/2 handshake",
    ];
    let phase = AtomicU8::new(0);
    let peer = addr.to_string();
    let attempt = async {
        match (addr, proxy) {
            (Address::Tcp(_) | Address::Name { .. }, Some(proxy)) => {
                let tcp = TcpStream::connect((proxy.host(), proxy.port()))
                    .await
                    .map_err(|e| Status::from_io(&format!("proxy {proxy}: connect"), e))?;
                tcp_options(&tcp, settings)?;
                phase.store(1, Ordering::Relaxed);
                let target = connect_target(addr);
                let tunnel = proxy::tunnel(tcp, proxy, &target, PROXY_USER_AGENT).await?;
                // A failure inside the tunnel may be the proxy's doing (it closed it): say it is there.
                handshakes(tunnel, settings, tls, &peer, &phase)
                    .await
                    .map_err(|status| {
                        Status::new(
                            status.code(),
                            format!("{} (through proxy {proxy})", status.message()),
                        )
                        .with_source(status)
                    })
            }
            (Address::Tcp(addr), None) => {
                let tcp = TcpStream::connect(addr)
                    .await
                    .map_err(|e| Status::from_io("connect", e))?;
                tcp_options(&tcp, settings)?;
                handshakes(tcp, settings, tls, &peer, &phase).await
            }
            (Address::Unix(path), _) => {
                let unix = UnixStream::connect(&**path)
                    .await
                    .map_err(|e| Status::from_io(&format!("connect to {peer}"), e))?;
                handshakes(unix, settings, tls, &peer, &phase).await
            }
            (Address::UnixAbstract(name), _) => {
                let name = name.clone();
                let unix = tokio::task::spawn_blocking(move || connect_abstract(&name))
                    .await
                    .map_err(|e| Status::new(Code::Unavailable, format!("connect to {peer}: {e}")))?
                    .and_then(UnixStream::from_std)
                    .map_err(|e| Status::from_io(&format!("connect to {peer}"), e))?;
                handshakes(unix, settings, tls, &peer, &phase).await
            }
            // A host name with no proxy (a registry's `host:port`): resolved here (the system's resolver),
            // its addresses tried in order, all within the attempt's deadline.
            (Address::Name { host, port }, None) => {
                let tcp = connect_name(host, *port).await?;
                tcp_options(&tcp, settings)?;
                handshakes(tcp, settings, tls, &peer, &phase).await
            }
        }
    };
    match tokio::time::timeout_at(deadline, attempt).await {
        Ok(result) => result,
        Err(_) => Err(Status::new(
            Code::Unavailable,
            format!(
                "connection attempt timed out (in the {}{})",
                phases[usize::from(phase.load(Ordering::Relaxed)).min(3)],
                proxy.map(|p| format!(", proxy {p}")).unwrap_or_default()
            ),
        )),
    }
}

/// A TCP connection to `host:port` without a proxy: the name is looked up with the system's resolver
/// (an IP literal is itself) and its addresses are tried in the order given, the first that connects
/// winning. The caller bounds the whole with the attempt's deadline.
async fn connect_name(host: &str, port: u16) -> Result<TcpStream, Status> {
    let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| Status::from_io(&format!("resolve {host}"), e))?
        .collect();
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(tcp) => return Ok(tcp),
            Err(e) => last = Some(Status::from_io(&format!("connect to {addr}"), e)),
        }
    }
    Err(last.unwrap_or_else(|| {
        Status::new(Code::Unavailable, format!("{host} resolved to no address"))
    }))
}

/// What a CONNECT request names for `addr`: `host:port`.
fn connect_target(addr: &Address) -> String {
    match addr {
        Address::Tcp(addr) => proxy::authority_form(&addr.ip().to_string(), addr.port()),
        Address::Name { host, port } => proxy::authority_form(host, *port),
        Address::Unix(_) | Address::UnixAbstract(_) => addr.to_string(),
    }
}

/// A connection to the socket named `name` in Linux's abstract namespace, made by std (tokio has no
/// abstract addresses) with a blocking `connect`: the caller runs it on the blocking pool, as that
/// `connect` waits while the listener's backlog is full (the attempt's deadline still ends the wait
/// for the channel).
#[cfg(target_os = "linux")]
fn connect_abstract(name: &str) -> std::io::Result<std::os::unix::net::UnixStream> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let std = std::os::unix::net::UnixStream::connect_addr(&addr)?;
    std.set_nonblocking(true)?;
    Ok(std)
}

/// Abstract sockets exist only on Linux.
#[cfg(not(target_os = "linux"))]
fn connect_abstract(_name: &str) -> std::io::Result<std::os::unix::net::UnixStream> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "abstract Unix sockets exist only on Linux",
    ))
}

/// TCP_NODELAY and the kernel's keepalive, as the settings say.
fn tcp_options(tcp: &TcpStream, settings: &Http2Settings) -> Result<(), Status> {
    tcp.set_nodelay(settings.tcp_nodelay)
        .map_err(|e| Status::from_io("set TCP_NODELAY", e))?;
    if let Some(idle) = settings.tcp_keepalive {
        set_tcp_keepalive(tcp, idle);
    }
    Ok(())
}

/// TLS when the channel has it, then HTTP/2, on a connected socket; `phase` says which step runs.
async fn handshakes<T>(
    io: T,
    settings: &Http2Settings,
    tls: Option<&TlsConnector>,
    peer: &str,
    phase: &AtomicU8,
) -> Result<Established, Status>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    match tls {
        None => {
            phase.store(3, Ordering::Relaxed);
            establish(io, settings, None, peer).await
        }
        Some(tls) => {
            phase.store(2, Ordering::Relaxed);
            let (io, handshake) = tls.connect(io).await?;
            phase.store(3, Ordering::Relaxed);
            establish(io, settings, Some(&handshake), peer).await
        }
    }
}

/// Turns on the kernel's TCP keepalive probes (a dead peer is found even when nothing is sent).
pub(crate) fn set_tcp_keepalive<S: std::os::fd::AsFd>(socket: &S, idle: Duration) {
    let params = socket2::TcpKeepalive::new()
        .with_time(idle)
        .with_interval(idle);
    if let Err(e) = socket2::SockRef::from(socket).set_tcp_keepalive(&params) {
        tracing::debug!(error = %e, "could not set TCP keepalive");
    }
}

/// A connection's HTTP/2 side, once its server has answered.
pub(crate) struct Established {
    pub(crate) send: SendRequest<Bytes>,
    /// The task driving the connection (abort it to close the connection).
    pub(crate) driver: JoinHandle<()>,
    /// Fires when the connection has ended.
    pub(crate) closed: oneshot::Receiver<()>,
    pub(crate) seen: Arc<Seen>,
    pub(crate) ping_pong: Option<h2::PingPong>,
}

/// The HTTP/2 handshake on a connected byte stream (TCP, or TLS over TCP), the task that drives the
/// connection, and a PING that shows the server accepted it.
pub(crate) async fn establish<T>(
    io: T,
    settings: &Http2Settings,
    tls: Option<&Handshake>,
    peer: &str,
) -> Result<Established, Status>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (io, seen) = Sniffer::new(io);
    let (send, mut connection) = settings
        .client_builder()
        .handshake::<_, Bytes>(io)
        .await
        .map_err(|e| connection_failed(e, tls, &seen))?;
    let mut ping_pong = connection.ping_pong();
    // The server's SETTINGS come before its PING ACK: an answered PING means the connection was accepted.
    // The PING is queued before the connection's task first runs, so it leaves in one write with the
    // preface and SETTINGS (and a server that answers in another protocol and closes has its answer read,
    // rather than failing a second write).
    let mut ping_sent = match ping_pong.as_mut() {
        Some(ping_pong) => ping_pong.send_ping(h2::Ping::opaque()),
        None => Ok(()),
    };
    let (closed_tx, closed) = oneshot::channel::<()>();
    let peer_name = peer.to_owned();
    let driver = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(addr = %peer_name, error = %e, "connection ended with an error");
        }
        let _ = closed_tx.send(());
    });
    if let (Some(ping_pong), Ok(())) = (ping_pong.as_mut(), &ping_sent) {
        ping_sent = std::future::poll_fn(|cx| ping_pong.poll_pong(cx))
            .await
            .map(drop);
    }
    if let Err(e) = ping_sent {
        driver.abort();
        // A server that answers and sends GOAWAY before the PING comes back (overloaded, draining) gave
        // no usable connection: a failure, so the next attempt waits for the backoff (treating it as
        // READY then IDLE would reset the backoff and reconnect in a tight loop).
        if let Some(goaway) = seen.goaway() {
            return Err(Status::new(
                Code::Unavailable,
                format!(
                    "the server sent GOAWAY (error code {}, {:?}) before the connection was ready",
                    goaway.error_code,
                    String::from_utf8_lossy(&goaway.debug_data)
                ),
            )
            .with_source(e));
        }
        return Err(connection_failed(e, tls, &seen));
    }
    Ok(Established {
        send,
        driver,
        closed,
        seen,
        ping_pong,
    })
}

/// The status of a connection that failed while HTTP/2 started: the TLS cause when there is one.
pub(crate) fn connection_failed(err: h2::Error, tls: Option<&Handshake>, seen: &Seen) -> Status {
    if let Some(status) = seen.wrong_protocol(tls.is_some()) {
        return status.with_source(err);
    }
    tls.and_then(|tls| tls::connection_error(&err, tls, seen.last_frame_at().is_some()))
        .unwrap_or_else(|| Status::from_h2(err))
}

/// Aborts a task when dropped.
pub(crate) struct AbortOnDrop(pub(crate) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
