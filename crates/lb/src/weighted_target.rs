//! weighted_target over the localities of one xDS priority (`beyond-a6.md` §12, gRFC A28), each locality a
//! round_robin leaf over the policy's shared subchannels (`client-channel.md`'s round_robin rules, as in
//! `round_robin.rs`): every endpoint is kept connected, a backend that failed since it was last READY counts
//! as TRANSIENT_FAILURE while it reconnects, and a locality's state is the aggregate of its backends.
//!
//! The weighted target's state is the aggregate of its localities (READY if any is, else CONNECTING, else
//! IDLE, else TRANSIENT_FAILURE, also without localities); a locality that reported TRANSIENT_FAILURE counts
//! as such until it is READY again (sticky, as C-core). Picks go weighted-random over the READY localities
//! only (done by the picker, `cluster_picker.rs`, from [`WeightedTarget::ready`]).
//!
//! Not here: the TRANSIENT_FAILURE picker over failed localities' own errors (the cluster fails with one
//! message), and the 15-minute retention of removed localities (they go at once, as grpc-go).

use std::collections::HashSet;
use std::time::Instant;

use grpc_base::Address;

use crate::cluster_picker::ReadyLocality;
use crate::round_robin::effective_state;
use crate::state::ConnectivityState;
use crate::subchannel::{SubchannelId, Subchannels};
use crate::xds_config::PriorityConfig;

struct Locality {
    name: String,
    weight: u32,
    /// Its endpoints with their subchannels, without duplicates. A subchannel lives as long as some
    /// locality uses its address, so the ids stay valid while the locality exists.
    backends: Vec<(SubchannelId, Address)>,
    /// The state the locality reported (sticky TRANSIENT_FAILURE).
    state: ConnectivityState,
}

/// The localities of one priority.
pub(crate) struct WeightedTarget {
    localities: Vec<Locality>,
}

impl WeightedTarget {
    pub(crate) fn new() -> WeightedTarget {
        WeightedTarget {
            localities: Vec::new(),
        }
    }

    /// Applies a new locality list: a locality keeps its state under the same name; every address gets a
    /// subchannel (an existing one if another locality or cluster has the address), which connects if
    /// IDLE.
    pub(crate) fn update(&mut self, config: &PriorityConfig, subs: &mut Subchannels, now: Instant) {
        let mut old = std::mem::take(&mut self.localities);
        for l in &config.localities {
            let state = old
                .iter()
                .position(|o| o.name == l.name)
                .map_or(ConnectivityState::Connecting, |i| old.swap_remove(i).state);
            let mut seen = HashSet::with_capacity(l.addresses.len());
            let mut backends = Vec::with_capacity(l.addresses.len());
            for a in &l.addresses {
                if seen.insert(a) {
                    let id = subs.find(a).unwrap_or_else(|| subs.add(a.clone()));
                    subs.connect(id, now);
                    backends.push((id, a.clone()));
                }
            }
            self.localities.push(Locality {
                name: l.name.clone(),
                weight: l.weight.get(),
                backends,
                state,
            });
        }
    }

    /// Every address of every locality.
    pub(crate) fn addresses(&self) -> impl Iterator<Item = &Address> {
        self.localities
            .iter()
            .flat_map(|l| l.backends.iter().map(|(_, a)| a))
    }

    /// Recomputes the localities' states from their subchannels and returns the aggregate.
    pub(crate) fn refresh(&mut self, subs: &Subchannels) -> ConnectivityState {
        for l in &mut self.localities {
            let raw = ConnectivityState::aggregate(
                l.backends.iter().map(|(id, _)| effective_state(subs, *id)),
            );
            let sticky = l.state == ConnectivityState::TransientFailure
                && matches!(raw, ConnectivityState::Connecting | ConnectivityState::Idle);
            if !sticky {
                l.state = raw;
            }
        }
        ConnectivityState::aggregate(self.localities.iter().map(|l| l.state))
    }

    /// The READY localities with their READY subchannels.
    pub(crate) fn ready(&self, subs: &Subchannels) -> Vec<ReadyLocality> {
        self.localities
            .iter()
            .filter(|l| l.state == ConnectivityState::Ready)
            .map(|l| ReadyLocality {
                weight: l.weight,
                subchannels: l
                    .backends
                    .iter()
                    .filter(|(id, _)| subs.state(*id) == ConnectivityState::Ready)
                    .cloned()
                    .collect(),
            })
            .filter(|l| !l.subchannels.is_empty())
            .collect()
    }
}
