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

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Instant;

use grpc_base::Address;

use crate::cluster_picker::ReadyLocality;
use crate::ejections::Ejections;
use crate::round_robin::effective_state;
use crate::state::{ConnectivityState, SubchannelId};
use crate::subchannel::{LatestError, StateCounts, Subchannels};
use crate::transport::TransportKey;
use crate::work::{rebuilt, visit};
use crate::xds_config::PriorityConfig;

struct Locality {
    name: String,
    weight: u32,
    /// Its endpoints with their subchannels, without duplicates, and the state each counts as. A
    /// subchannel lives as long as some locality uses its address, so the ids stay valid while the
    /// locality exists.
    backends: Vec<(SubchannelId, Address, ConnectivityState)>,
    /// How many of its backends count in each state.
    counts: StateCounts,
    /// The state the locality reported (sticky TRANSIENT_FAILURE).
    state: ConnectivityState,
}

/// The localities of one priority.
///
/// An event costs O(1) per subchannel it changed (and per locality of that subchannel): each backend's
/// state is counted in its localities, each locality's in the target; the READY localities and their READY
/// backends are listed again ([`WeightedTarget::ready`], O(n)) only after they changed.
pub(crate) struct WeightedTarget {
    localities: Vec<Locality>,
    /// Where each subchannel is: (locality, index in its backends); an address may be in several
    /// localities.
    index: HashMap<SubchannelId, Vec<(usize, usize)>>,
    /// How many localities report each state.
    states: StateCounts,
    /// Every locality's state must be computed again (a new locality list).
    recount: bool,
    /// The READY localities, or their READY backends, changed since the last [`WeightedTarget::ready`].
    dirty: bool,
    /// The latest connection error among its backends.
    latest_error: LatestError,
}

impl WeightedTarget {
    pub(crate) fn new() -> WeightedTarget {
        WeightedTarget {
            localities: Vec::new(),
            index: HashMap::new(),
            states: StateCounts::default(),
            recount: true,
            dirty: true,
            latest_error: LatestError::default(),
        }
    }

    /// Applies a new locality list: a locality keeps its state under the same name; every address gets a
    /// subchannel (an existing one if another locality or cluster has the address), which connects if
    /// IDLE.
    pub(crate) fn update(
        &mut self,
        config: &PriorityConfig,
        transport: Option<&TransportKey>,
        subs: &mut Subchannels,
        now: Instant,
    ) {
        let mut old: HashMap<String, ConnectivityState> = self
            .localities
            .drain(..)
            .map(|l| (l.name, l.state))
            .collect();
        self.index.clear();
        for l in &config.localities {
            let state = old.remove(&l.name).unwrap_or(ConnectivityState::Connecting);
            let mut seen = HashSet::with_capacity(l.addresses.len());
            let mut backends = Vec::with_capacity(l.addresses.len());
            let mut counts = StateCounts::default();
            for a in &l.addresses {
                visit(1);
                if seen.insert(a) {
                    let id = subs.find_or_add_with(a, transport);
                    subs.connect(id, now);
                    let s = effective_state(subs, id);
                    counts.add(s);
                    let place = (self.localities.len(), backends.len());
                    self.index.entry(id).or_default().push(place);
                    backends.push((id, a.clone(), s));
                }
            }
            self.localities.push(Locality {
                name: l.name.clone(),
                weight: l.weight.get(),
                backends,
                counts,
                state,
            });
        }
        self.states = StateCounts::default();
        for l in &self.localities {
            self.states.add(l.state);
        }
        self.recount = true;
        self.dirty = true;
    }

    /// Every address of every locality.
    pub(crate) fn addresses(&self) -> impl Iterator<Item = &Address> {
        self.localities
            .iter()
            .flat_map(|l| l.backends.iter().map(|(_, a, _)| a))
    }

    /// Whether a locality has subchannel `id`.
    pub(crate) fn contains(&self, id: SubchannelId) -> bool {
        visit(1);
        self.index.contains_key(&id)
    }

    /// Counts again the subchannels in `changed` and those whose ejection changed (those of other targets
    /// are ignored), each ejected one as TRANSIENT_FAILURE, recomputes the states of their localities, and
    /// returns the aggregate. After a new locality list, counts every backend again.
    pub(crate) fn refresh(
        &mut self,
        changed: &BTreeSet<SubchannelId>,
        subs: &Subchannels,
        ejections: Ejections<'_>,
    ) -> ConnectivityState {
        let mut touched = Vec::new();
        if self.recount {
            // `update` counted the backends without the cluster's ejections.
            for l in &mut self.localities {
                l.counts = StateCounts::default();
                for b in &mut l.backends {
                    visit(1);
                    self.latest_error.offer(subs, b.0);
                    b.2 = ejections.state(subs, b.0);
                    l.counts.add(b.2);
                }
            }
            self.dirty = true;
        }
        for id in changed.iter().chain(ejections.changed()) {
            visit(1);
            let Some(places) = self.index.get(id) else {
                continue;
            };
            self.latest_error.offer(subs, *id);
            let new = ejections.state(subs, *id);
            for &(i, j) in places {
                visit(1);
                let Some(l) = self.localities.get_mut(i) else {
                    continue;
                };
                let Some(old) = l
                    .backends
                    .get_mut(j)
                    .map(|b| std::mem::replace(&mut b.2, new))
                else {
                    continue;
                };
                if old == new {
                    continue;
                }
                let was_ready = old == ConnectivityState::Ready;
                l.counts.remove(old);
                l.counts.add(new);
                // A READY locality lists its READY backends.
                if was_ready != (new == ConnectivityState::Ready)
                    && l.state == ConnectivityState::Ready
                {
                    self.dirty = true;
                }
                touched.push(i);
            }
        }
        if std::mem::take(&mut self.recount) {
            touched = (0..self.localities.len()).collect();
        }
        for i in touched {
            let Some(l) = self.localities.get_mut(i) else {
                continue;
            };
            let raw = l.counts.aggregate();
            let sticky = l.state == ConnectivityState::TransientFailure
                && matches!(raw, ConnectivityState::Connecting | ConnectivityState::Idle);
            if !sticky && raw != l.state {
                if (l.state == ConnectivityState::Ready) != (raw == ConnectivityState::Ready) {
                    self.dirty = true;
                }
                self.states.remove(l.state);
                self.states.add(raw);
                l.state = raw;
            }
        }
        self.states.aggregate()
    }

    /// The latest connection error among its backends, if any.
    pub(crate) fn last_error(&self) -> Option<&str> {
        self.latest_error.message()
    }

    /// Whether the READY localities or their READY subchannels changed since this was last asked.
    pub(crate) fn take_dirty(&mut self) -> bool {
        std::mem::take(&mut self.dirty)
    }

    /// The READY localities with their READY subchannels (O(n): for a new picker).
    pub(crate) fn ready(&self) -> Vec<ReadyLocality> {
        self.localities
            .iter()
            .filter(|l| l.state == ConnectivityState::Ready)
            .map(|l| {
                rebuilt(l.backends.len());
                ReadyLocality {
                    weight: l.weight,
                    subchannels: l
                        .backends
                        .iter()
                        .filter(|(_, _, s)| *s == ConnectivityState::Ready)
                        .map(|(id, a, _)| (*id, a.clone()))
                        .collect(),
                }
            })
            .filter(|l| !l.subchannels.is_empty())
            .collect()
    }
}
