//! What the channel logs through `tracing`. Each test installs a capturing subscriber with
//! `grpc_test_support::tracing_capture::install`, which runs them one at a time: `tracing` caches each
//! callsite's interest per process, so these tests share their binary with no other test.
//!
//! One test binary of grpc-channel's integration tests (rust-analyzer's `tests/slow-tests/main.rs` is the
//! model): each module was a test binary of its own, and its tests keep their names under the module's.

mod config_notes_tracing;
mod goaway_tracing;
mod health_edges_tracing;
mod health_tracing;
mod outlier_tracing;
mod policy_tracing;
mod proxy_edges_tracing;
mod too_many_pings_tracing;
