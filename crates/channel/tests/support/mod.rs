//! Shared helpers of the integration tests: in-process servers on loopback ports.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use grpc_channel::Channel;
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

/// A bound on how long a test's call may take: the test fails instead of hanging. (Real time: a guard, not a
/// measurement.)
pub const NO_HANG: Duration = Duration::from_secs(20);

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
