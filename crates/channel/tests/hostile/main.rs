//! Hostile and malformed servers, and extreme sizes and counts.
//!
//! One test binary of grpc-channel's integration tests (rust-analyzer's `tests/slow-tests/main.rs` is the
//! model): each module was a test binary of its own, and its tests keep their names under the module's.

mod extremes;
mod hostile;
mod malformed_responses;
