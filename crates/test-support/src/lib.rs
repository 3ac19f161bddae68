//! What the workspace's integration tests share (h2's `tests/h2-support` is the model): in-process servers
//! on loopback ports and channels to them, a scriptable h2 server ([`h2_server`]) and its health Watch
//! ([`health_watch`]), gRPC framing ([`frames`]), guards against hangs ([`guards`]), service-config builders
//! ([`config`]), one call of each shape ([`shapes`]), an in-process HTTP CONNECT proxy
//! ([`scripted_proxy`]), a subscriber recording tracing events ([`tracing_capture`]) and a layer recording
//! spans ([`spans`]), the xDS end-to-end helpers ([`xds`]), the helpers of the tests that drive the
//! fault-injecting server's `Flaky*` methods ([`flaky`]), and the Python grpcio peer ([`grpcio`]).
//!
//! A dev-dependency of grpc-channel and grpc-feature-tests, never published. It depends on grpc-channel, so
//! only integration tests (which link the same grpc-channel) may use it, never grpc-channel's unit tests:
//! those would see a second copy of every grpc-channel type.

pub mod config;
pub mod flaky;
pub mod frames;
pub mod grpcio;
pub mod grpcio_xds;
pub mod guards;
pub mod h2_server;
pub mod health_watch;
pub mod scripted_proxy;
pub mod shapes;
pub mod spans;
pub mod tracing_capture;
pub mod xds;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};

use grpc_channel::{Channel, Request, Status};
use interop::faulty::FaultyServer;

/// Starts the interop server on a free loopback port.
pub async fn interop_server() -> SocketAddr {
    interop::server::spawn("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind interop server")
}

/// Starts the fault-injecting server.
pub async fn faulty_server() -> FaultyServer {
    FaultyServer::start().await.expect("bind faulty server")
}

/// A channel to `addr`.
pub fn channel(addr: SocketAddr) -> Channel {
    Channel::new(format!("ipv4:{addr}")).expect("channel")
}

/// A channel to `target` with `config` as its default service config, and no service-config lookups.
pub fn channel_with_config(target: &str, config: impl Into<String>) -> Channel {
    Channel::builder(target)
        .default_service_config(config)
        .service_config_lookup(false)
        .build()
        .expect("channel")
}

/// The `ipv4:` target of several addresses.
pub fn ipv4_target(addrs: &[SocketAddr]) -> String {
    let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    format!("ipv4:{}", list.join(","))
}

/// `req` with these metadata entries added.
pub fn with_metadata<T>(mut req: Request<T>, pairs: &[(&str, &str)]) -> Request<T> {
    for (k, v) in pairs {
        req.metadata_mut().append(k, v).expect("md");
    }
    req
}

/// A loopback port where nothing listens, held for as long as the returned socket lives: connections are
/// refused, and no other test can be given the port meanwhile. Drop the socket just before starting a server
/// on the port.
pub fn reserved_port() -> (tokio::net::TcpSocket, SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let addr = socket.local_addr().expect("addr");
    (socket, addr)
}

/// A Unix socket path for one test (unique per test binary and `name`).
pub fn socket_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("grpc-channel-{}-{name}.sock", std::process::id()))
}

/// A `Stream` over an iterator, for `client_streaming` and `bidi_streaming`.
pub struct IterStream<I>(pub I);

impl<I: Iterator + Unpin> futures_core::Stream for IterStream<I> {
    type Item = I::Item;
    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<I::Item>> {
        Poll::Ready(self.0.next())
    }
}

/// A request stream the test feeds while the call runs (for the bidi and client-streaming pumps): it ends
/// when the test drops the sending half.
pub struct Fed<T>(pub tokio::sync::mpsc::UnboundedReceiver<T>);

impl<T> futures_core::Stream for Fed<T> {
    type Item = T;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}

/// An interop server on a free loopback port, as a handle (its address, its health statuses).
pub async fn interop_server_handle() -> interop::server::ServerHandle {
    interop::server::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("server")
}

/// One `UnaryCall` asking for the server's id, bounded by `bound`: which server answered it.
pub async fn served_by(channel: &Channel, bound: std::time::Duration) -> Result<String, Status> {
    let request = interop_proto::SimpleRequest {
        fill_server_id: true,
        ..interop_proto::SimpleRequest::default()
    };
    let call = channel.unary::<_, interop_proto::SimpleResponse>(
        interop_proto::paths::UNARY_CALL,
        Request::new(request),
    );
    tokio::time::timeout(bound, call)
        .await
        .expect("the call ends by itself")
        .map(|r| r.into_inner().server_id)
}

/// [`served_by`] on the running clock, bounded by [`guards::NO_HANG`].
pub async fn served(channel: &Channel) -> Result<String, Status> {
    served_by(channel, guards::NO_HANG).await
}
