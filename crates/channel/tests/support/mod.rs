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
