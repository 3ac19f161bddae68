//! What the feature tests share: the servers they call and a bound against hangs, request-body framing for
//! the tower adapter's tests, a call retried twice against the fault-injecting server (for spans and
//! metrics), a `tracing` layer that records spans ([`spans`]), and the compression tests' peers: a tonic
//! server ([`tonic_server`]) and the Python grpcio interop server ([`grpcio`]), which is also the health
//! checking tests' backend. grpc-channel's scriptable h2 server ([`h2_server`]), with its framing
//! ([`frames`]) and paused-clock guards ([`guards`]), comes from that crate's test support, not a copy.
//!
//! Every test file compiles this module on its own and uses part of it, hence the `allow` below.

#![allow(dead_code, unreachable_pub)]

pub mod grpcio;
pub mod spans;
pub mod tonic_server;

// grpc-channel's own test support, shared rather than copied: its scriptable h2 server (a handler per
// stream, every DATA chunk, END_STREAM and reset logged), the framing it reads and writes, and the bounds
// against hangs on tokio's paused clock.
#[path = "../../../channel/tests/support/frames.rs"]
pub mod frames;
#[path = "../../../channel/tests/support/guards.rs"]
pub mod guards;
#[path = "../../../channel/tests/support/h2_server.rs"]
pub mod h2_server;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use grpc_channel::framing::{self, HEADER_LEN};
use grpc_channel::{Channel, Request};
use interop::faulty::{methods, FaultyServer};

/// A bound on how long a test's call may take: the test fails instead of hanging. (Real time: a guard, not
/// a measurement.)
pub const NO_HANG: Duration = Duration::from_secs(20);

/// Starts the interop server on a free loopback port.
pub async fn interop_server() -> SocketAddr {
    interop::server::spawn(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind")
}

/// A gRPC Length-Prefixed-Message: the compressed flag, the 4-byte length, the payload (the prefix written
/// by `grpc_channel::framing::put_header`).
pub fn frame(compressed: bool, payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(HEADER_LEN + payload.len());
    framing::put_header(&mut b, compressed, payload.len() as u32);
    b.extend_from_slice(payload);
    b.freeze()
}

/// Up to 4 attempts of every `fault.Faulty` method on UNAVAILABLE: backoff 0.1 s, ×2, at most 1 s.
pub const RETRY_CONFIG: &str = r#"{"methodConfig":[{"name":[{"service":"fault.Faulty"}],"retryPolicy":{"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}"#;

/// A `Flaky` call under [`RETRY_CONFIG`] whose first two attempts fail, on a new channel to `server`; the
/// channel, after the third attempt succeeded.
pub async fn retried_call(server: &FaultyServer) -> Channel {
    let channel = Channel::builder(format!("ipv4:{}", server.addr))
        .default_service_config(RETRY_CONFIG)
        .build()
        .expect("channel");
    let mut request = Request::new(Bytes::new());
    request
        .metadata_mut()
        .append("x-test-key", "observed")
        .expect("key");
    request
        .metadata_mut()
        .append("x-fail-times", "2")
        .expect("header");
    let response = channel
        .unary_raw(methods::FLAKY, request)
        .await
        .expect("the third attempt succeeds");
    assert_eq!(response.trailers().get("x-attempt"), Some("3"));
    channel
}
