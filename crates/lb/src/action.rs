//! What a policy asks of the channel ([`LbAction`]: connect (an address, with a transport), disconnect,
//! re-resolve, publish a picker) and the state changes its subchannels' timers cause ([`TimerEvent`]).

use std::time::Instant;

use grpc_base::Address;

use crate::picker::PickerSpec;
use crate::state::{ConnectivityState, SubchannelId};
use crate::transport::TransportKey;

/// What the channel must do for the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LbAction {
    /// Start a connection attempt to `addr` for subchannel `id`; give up at `deadline`, and report the result
    /// with `subchannel_ready` (once the server's SETTINGS arrived) or `subchannel_failed`.
    Connect {
        /// The subchannel.
        id: SubchannelId,
        /// Its address.
        addr: Address,
        /// The transport to connect with (`None`: the channel's own).
        transport: Option<TransportKey>,
        /// When to give up on this attempt.
        deadline: Instant,
    },
    /// Close subchannel `id`'s connection (or attempt).
    Disconnect {
        /// The subchannel.
        id: SubchannelId,
    },
    /// Ask the resolver for fresh addresses.
    ResolveNow,
    /// The policy's state changed: publish a new picker.
    UpdatePicker {
        /// The policy's (the channel's) connectivity state.
        state: ConnectivityState,
        /// What picks should do.
        picker: PickerSpec,
    },
}

/// A state change a timer caused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimerEvent {
    /// The backoff ended: TRANSIENT_FAILURE → IDLE.
    BackoffOver(SubchannelId),
    /// The attempt's deadline passed: CONNECTING → TRANSIENT_FAILURE.
    ConnectTimedOut(SubchannelId),
}
