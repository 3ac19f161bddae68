//! The gRPC interop suite for `grpc-channel`: the test cases (client side), an interop server on h2's server
//! API (with the standard health service), a fault-injecting server for tests, and a raw-frame HTTP/2 server
//! for what h2 cannot send. The binaries `interop-client` and `interop-server` wrap them with the standard
//! flags (`shared/spec/interop.md`).
//!
//! Cargo features: `test-dns` adds the in-process DNS server tests resolve through (`dns`); `xds-server` adds
//! the test xDS management server (`xds_server`, `xds_resources`) and the `xds-control-plane` binary.

pub mod chaos;
pub mod client;
pub mod counter;
#[cfg(feature = "test-dns")]
pub mod dns;
pub mod etcd;
pub mod faulty;
pub mod flags;
pub mod grpcio_peer;
pub mod health;
pub mod raw;
pub mod server;
pub mod server_call;
#[cfg(test)]
mod test_h2;
pub mod tinyproxy;
pub mod tls;
#[cfg(feature = "xds-server")]
pub mod xds_resources;
#[cfg(feature = "xds-server")]
pub mod xds_server;
