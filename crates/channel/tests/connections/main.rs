//! Connections: connecting, GOAWAY, keepalive, TLS, HTTP CONNECT proxies (scripted, hostile, tinyproxy) and
//! Unix socket targets.
//!
//! One test binary of grpc-channel's integration tests (rust-analyzer's `tests/slow-tests/main.rs` is the
//! model): each module was a test binary of its own, and its tests keep their names under the module's.

mod connect_edges;
mod goaway;
mod keepalive;
mod proxy_edges;
mod proxy_hostile;
mod proxy_tinyproxy;
mod tls;
mod tls_edges;
mod unix_targets;
