//! Calls of every shape against the interop server and scriptable h2 servers: unary and streaming calls,
//! deadlines, compression, interceptors, request writing and flow control, dropped and early calls,
//! coalescing, the I/O layer, exactly-once and tonic habits.
//!
//! One test binary of grpc-channel's integration tests (rust-analyzer's `tests/slow-tests/main.rs` is the
//! model): each module was a test binary of its own, and its tests keep their names under the module's.

mod calls;
mod coalescing;
mod compression_encodings;
mod compression_streams;
mod deadlines;
mod dropped_and_early_calls;
mod exactly_once;
mod footprint;
mod interceptors;
mod io_layer;
mod request_writing;
mod streaming_calls;
mod tonic_habits;
