//! ring_hash's picker side (gRFC A42, `ring_hash.rs` has the policy): what picks for a ring_hash priority do
//! ([`RingPick`]), the picker with connection handles that walks the ring from a call's request hash
//! ([`RingPicker`]), and the two values a ring child shares with its pickers ([`ConnectRequests`],
//! [`FailureNote`]).

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};

use grpc_base::Address;

use crate::pick::PickResult;
use crate::state::{ConnectivityState, SubchannelId};

/// The subchannels a ring's pickers want connected, shared by the ring child and its pickers, in the
/// order picks asked (each once: a pick checks in O(1), however many are asked for). Two are equal when
/// they are the same list.
#[derive(Clone, Default)]
pub(crate) struct ConnectRequests(Arc<Mutex<(Vec<SubchannelId>, HashSet<SubchannelId>)>>);

impl ConnectRequests {
    pub(crate) fn push(&self, id: SubchannelId) {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (list, asked) = &mut *guard;
        if asked.insert(id) {
            list.push(id);
        }
    }

    pub(crate) fn take(&self) -> Vec<SubchannelId> {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (list, asked) = &mut *guard;
        asked.clear();
        std::mem::take(list)
    }
}

impl PartialEq for ConnectRequests {
    fn eq(&self, other: &ConnectRequests) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ConnectRequests {}

/// The message of a pick that finds every endpoint failed, shared by a ring child and its pickers: a new
/// connection error anywhere changes what failing picks say without a new picker (nothing a pick can reach
/// changed, and a new picker costs the channel O(n)). Two are equal when they are the same note.
#[derive(Clone, Default)]
pub(crate) struct FailureNote(Arc<Mutex<String>>);

impl FailureNote {
    pub(crate) fn set(&self, message: String) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = message;
    }

    pub(crate) fn get(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl PartialEq for FailureNote {
    fn eq(&self, other: &FailureNote) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for FailureNote {}

/// What picks for a ring_hash priority do: the ring, its endpoints' states, and where to record the IDLE
/// endpoints a pick wants connected.
#[derive(Clone, PartialEq, Eq)]
pub struct RingPick {
    pub(crate) ring: Arc<[(u64, usize)]>,
    pub(crate) endpoints: Arc<[(SubchannelId, Address, ConnectivityState)]>,
    pub(crate) requests: ConnectRequests,
    pub(crate) failure: FailureNote,
}

impl RingPick {
    /// The endpoints (in the cluster's order) with their subchannels and states.
    pub fn endpoints(&self) -> &[(SubchannelId, Address, ConnectivityState)] {
        &self.endpoints
    }

    /// How many entries the ring has.
    pub fn ring_size(&self) -> usize {
        self.ring.len()
    }

    /// How many ring entries each endpoint has.
    #[cfg(test)]
    pub(crate) fn entry_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.endpoints.len()];
        for (_, e) in self.ring.iter() {
            counts[*e] += 1;
        }
        counts
    }
}

impl fmt::Debug for RingPick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingPick")
            .field("ring_size", &self.ring.len())
            .field("endpoints", &self.endpoints)
            .field("failure", &self.failure.get())
            .finish()
    }
}

/// A ring picker with connection handles.
pub(crate) struct RingPicker<T> {
    ring: Arc<[(u64, usize)]>,
    /// Per endpoint: its subchannel, address, state, and handle when READY.
    endpoints: Vec<(SubchannelId, Address, ConnectivityState, Option<T>)>,
    requests: ConnectRequests,
    failure: FailureNote,
}

impl<T> RingPicker<T> {
    pub(crate) fn new(
        spec: &RingPick,
        handle: &impl Fn(SubchannelId) -> Option<T>,
    ) -> RingPicker<T> {
        RingPicker {
            ring: spec.ring.clone(),
            endpoints: spec
                .endpoints
                .iter()
                .map(|(id, a, s)| {
                    let h = (*s == ConnectivityState::Ready)
                        .then(|| handle(*id))
                        .flatten();
                    (*id, a.clone(), *s, h)
                })
                .collect(),
            requests: spec.requests.clone(),
            failure: spec.failure.clone(),
        }
    }

    /// The READY endpoints' addresses.
    pub(crate) fn ready_addresses(&self) -> impl Iterator<Item = &Address> {
        self.endpoints
            .iter()
            .filter(|e| e.3.is_some())
            .map(|e| &e.1)
    }
}

impl<T: Clone> RingPicker<T> {
    /// The walk from the entry of `hash` (module docs). A pick carries no in-flight claim (the caller adds
    /// it).
    pub(crate) fn pick(&self, hash: u64) -> PickResult<T> {
        let n = self.ring.len();
        let start = self.ring.partition_point(|(h, _)| *h < hash);
        for k in 0..n {
            let Some((_, e)) = self.ring.get((start + k) % n) else {
                break;
            };
            let Some((id, addr, state, handle)) = self.endpoints.get(*e) else {
                continue;
            };
            match state {
                ConnectivityState::Ready => {
                    return match handle {
                        Some(h) => PickResult::Pick {
                            handle: h.clone(),
                            addr: addr.clone(),
                            guard: None,
                        },
                        None => PickResult::Queue { exit_idle: false },
                    }
                }
                ConnectivityState::Idle => {
                    self.requests.push(*id);
                    return PickResult::Queue { exit_idle: true };
                }
                ConnectivityState::Connecting => return PickResult::Queue { exit_idle: false },
                ConnectivityState::TransientFailure | ConnectivityState::Shutdown => {}
            }
        }
        PickResult::Fail(self.failure.get())
    }
}
