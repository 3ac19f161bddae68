//! Sans-IO gRPC load balancing: subchannel connectivity with connection backoff
//! (`doc/connection-backoff.md`), the pick_first (gRFC A62, A61, Happy Eyeballs) and round_robin policies, and
//! pickers that can steer a call's retries and hedges away from the addresses it already used.
//!
//! The channel drives an [`LbPolicy`]: it feeds address lists, subchannel events (ready, failed, closed) and
//! timers, and performs the [`LbAction`]s (connect, disconnect, re-resolve, publish a picker). Time arrives
//! as `now` arguments and randomness through an injected `grpc_base::Rng`. This crate knows nothing of
//! retries: it only honours the avoid hint of a [`PickRequest`]. Not here: the channel's event loop and
//! connections (the `grpc-channel` crate), weighted or xDS policies, health checking.

mod backoff;
mod pick_first;
mod picker;
mod policy;
mod round_robin;
mod state;
mod subchannel;

#[cfg(test)]
mod tests;

pub use backoff::{BackoffConfig, ConnectionBackoff};
pub use grpc_base::Address;
pub use pick_first::{interleave_families, DEFAULT_ATTEMPT_DELAY};
pub use picker::{PickRequest, PickResult, Picker, PickerSpec};
pub use policy::{LbPolicy, PolicyConfig};
pub use state::ConnectivityState;
pub use subchannel::{LbAction, SubchannelId};
