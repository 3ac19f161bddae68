//! The small vocabulary the sans-IO crates share, below all of them: `grpc-lb`, `grpc-retry` and
//! `grpc-transparent` depend on this crate and not on each other.
//!
//! - [`Address`]: where a backend is, a TCP socket address or a Unix-domain socket path, as the balancer
//!   connects to it and as a call's attempts avoid it.
//! - [`Endpoint`] and [`Attributes`]: one backend as a resolver names it (one or more addresses, gRFC A61)
//!   with the attributes a load-balancing policy may read.
//! - [`Rng`] and [`SplitMix64`]: randomness injected into the state machines (retry jitter, connection
//!   backoff jitter, address shuffling), so that tests can seed it and stay deterministic.
//! - [`FailurePlace`]: where an attempt failed (gRFC A6's transparent retries), which `grpc-transparent`
//!   classifies HTTP/2 errors into and `grpc-retry` decides on.
//!
//! This crate has no dependencies, does no I/O and reads no clock. The status code lives in `grpc-code`.

mod address;
mod endpoint;
mod failure_place;
mod rng;

pub use address::{Address, Family};
pub use endpoint::{AttributeValue, Attributes, Endpoint};
pub use failure_place::FailurePlace;
pub use rng::{Rng, SplitMix64};
