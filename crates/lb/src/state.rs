//! Connectivity states (`doc/connectivity-semantics-and-api.md`) and the ids of subchannels: the words every
//! part of the crate shares.

/// The connectivity state of a subchannel, a policy or a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnectivityState {
    /// No connection and no attempt: a new call (or the policy) starts one.
    Idle,
    /// Connecting (or resolving).
    Connecting,
    /// Connected, with the handshake done.
    Ready,
    /// A failure happened; waiting out a backoff before connecting again.
    TransientFailure,
    /// Closed for good.
    Shutdown,
}

impl ConnectivityState {
    /// The aggregate of several children (round_robin, A58): READY if any is READY, else CONNECTING if any
    /// is, else IDLE if any is, else TRANSIENT_FAILURE (also with no children at all).
    pub fn aggregate(states: impl IntoIterator<Item = ConnectivityState>) -> ConnectivityState {
        let (mut connecting, mut idle) = (false, false);
        for s in states {
            match s {
                ConnectivityState::Ready => return ConnectivityState::Ready,
                ConnectivityState::Connecting => connecting = true,
                ConnectivityState::Idle => idle = true,
                _ => {}
            }
        }
        if connecting {
            ConnectivityState::Connecting
        } else if idle {
            ConnectivityState::Idle
        } else {
            ConnectivityState::TransientFailure
        }
    }
}

/// Identifies a subchannel for the life of its policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubchannelId(pub u64);

#[cfg(test)]
mod tests {
    use super::ConnectivityState::{self, *};

    #[test]
    fn aggregate_prefers_ready_then_connecting_then_idle() {
        let cases: [(&[ConnectivityState], ConnectivityState); 7] = [
            (&[TransientFailure, Ready, Connecting], Ready),
            (&[TransientFailure, Connecting, Idle], Connecting),
            (&[TransientFailure, Idle], Idle),
            (&[TransientFailure, TransientFailure], TransientFailure),
            (&[Shutdown], TransientFailure),
            (&[], TransientFailure),
            (&[Idle, Ready], Ready),
        ];
        for (states, want) in cases {
            assert_eq!(
                ConnectivityState::aggregate(states.iter().copied()),
                want,
                "{states:?}"
            );
        }
    }
}
