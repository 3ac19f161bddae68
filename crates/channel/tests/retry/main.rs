//! Retries, hedging and retry throttling (gRFC A6), the application's retry policy, transparent retries,
//! streaming retries and the retry metadata calls expose.
//!
//! One test binary of grpc-channel's integration tests (rust-analyzer's `tests/slow-tests/main.rs` is the
//! model): each module was a test binary of its own, and its tests keep their names under the module's.

mod app_retry_policy;
mod exposed_retry_metadata;
mod hedging;
mod retry;
mod streaming_retry;
mod throttling;
mod transparent_retry;
