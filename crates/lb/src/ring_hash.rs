//! ring_hash (gRFC A42 with A61's changes; `beyond-a6.md` §10) as the child of one xDS priority: a ring over
//! every endpoint of the priority, over the policy's shared subchannels, and its picker (built from
//! [`RingPick`] in `ring_pick.rs`).
//!
//! * **Ring**: each endpoint's weight (locality weight × endpoint weight) as a fraction of the total;
//!   `scale = min(ceil(min_fraction × min_ring_size) / min_fraction, max_ring_size)`; walking the endpoints
//!   in order, each adds entries while the running count is below the running target (`+= scale ×
//!   fraction`), entry *i* of an endpoint hashing `"<ip:port>_<i>"` with XXH64, seed 0. Sorted by hash; a
//!   request hash goes to the first entry whose hash is ≥ it, wrapping to the first. Both sizes are capped
//!   at [`RING_SIZE_CAP`] (4096, grpc-go's and C-core's default local cap).
//! * **Endpoints** behave as A61's per-endpoint pick_first children: they connect lazily (a pick that lands
//!   on an IDLE one asks for it, see below), one that failed since it was last READY counts as
//!   TRANSIENT_FAILURE until READY again and reconnects by itself when its backoff ends (A62's sticky
//!   TRANSIENT_FAILURE), and a lost READY connection leaves it IDLE.
//! * **Aggregate state**: any READY → READY; two or more TRANSIENT_FAILURE → TRANSIENT_FAILURE; any
//!   CONNECTING → CONNECTING; one TRANSIENT_FAILURE among several endpoints → CONNECTING; any IDLE → IDLE;
//!   else TRANSIENT_FAILURE (also without endpoints). **Proactive connect**: after every refresh, if the
//!   aggregate is TRANSIENT_FAILURE or CONNECTING and no endpoint is CONNECTING, the first IDLE endpoint
//!   connects (else ring_hash under priority never recovers, grpc-go #7363); likewise when the aggregate
//!   is IDLE and the channel asked the policy to leave IDLE (`Channel::connect` and `ready` would else wait
//!   for a call that never comes).
//! * **Picker** ([`RingPick`]): from the request hash's entry, walk the ring: READY → pick it; IDLE → ask
//!   for its connection and queue (`exit_idle`); CONNECTING → queue; TRANSIENT_FAILURE → the next entry.
//!   All failed → fail with the priority's message. The picker records the IDLE endpoints it wants in a
//!   list shared with the policy ([`ConnectRequests`]); the channel's `exit_idle` makes the policy connect
//!   them (the picker itself stays a snapshot that starts nothing).
//!
//! Not here: A76's `hash_key` endpoint attribute and `requestHashHeader` (the ring keys on each endpoint's
//! address, and the request hash comes from the xDS route), ring_hash as a top-level policy outside xDS,
//! and the avoid hint (a call's hash, not its history, chooses its endpoint).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use grpc_base::Address;

use crate::ejections::Ejections;
use crate::ring_pick::{ConnectRequests, FailureNote, RingPick};
use crate::state::{ConnectivityState, SubchannelId};
use crate::subchannel::{LatestError, StateCounts, Subchannels};
use crate::transport::TransportKey;
use crate::work::{rebuilt, visit};
use crate::xds_config::PriorityConfig;

/// The local cap on both ring sizes (grpc-go's `GRPC_RING_HASH_CAP` and C-core's channel argument default).
pub const RING_SIZE_CAP: u64 = 4096;

/// XXH64 with seed 0, the hash of A42's rings and request hashes.
pub fn xxh64(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh64::xxh64(bytes, 0)
}

/// Builds a ring over endpoints given as (key, weight): sorted (hash, endpoint index) entries. Weights of 0
/// count as 1; sizes are capped at [`RING_SIZE_CAP`] and `min` at `max`. Empty without endpoints.
pub(crate) fn build_ring(endpoints: &[(String, u64)], min: u64, max: u64) -> Vec<(u64, usize)> {
    if endpoints.is_empty() {
        return Vec::new();
    }
    let max = max.clamp(1, RING_SIZE_CAP);
    let min = min.clamp(1, max);
    // Saturating: xDS bounds the weights (sums below 2^32 per locality and per priority), but a config
    // from elsewhere may not.
    let total = endpoints
        .iter()
        .fold(0u64, |sum, (_, w)| sum.saturating_add((*w).max(1)));
    let fraction = |w: u64| w.max(1) as f64 / total as f64;
    let min_fraction = endpoints
        .iter()
        .map(|(_, w)| fraction(*w))
        .fold(f64::INFINITY, f64::min);
    let scale = ((min_fraction * min as f64).ceil() / min_fraction).min(max as f64);
    let mut ring = Vec::with_capacity(scale.ceil() as usize);
    let (mut current, mut target) = (0.0f64, 0.0f64);
    for (index, (key, weight)) in endpoints.iter().enumerate() {
        target += scale * fraction(*weight);
        let mut count = 0u64;
        while current < target {
            ring.push((xxh64(format!("{key}_{count}").as_bytes()), index));
            count += 1;
            current += 1.0;
        }
    }
    ring.sort_unstable();
    ring
}

/// The A42 aggregate of a ring's endpoint states (rules in the module docs).
#[cfg(test)]
pub(crate) fn aggregate(states: &[ConnectivityState]) -> ConnectivityState {
    let mut counts = StateCounts::default();
    for s in states {
        counts.add(*s);
    }
    aggregate_counts(&counts)
}

/// The A42 aggregate of a ring's endpoints, from how many are in each state.
fn aggregate_counts(counts: &StateCounts) -> ConnectivityState {
    let count = |s| counts.count(s);
    let failed = count(ConnectivityState::TransientFailure) + count(ConnectivityState::Shutdown);
    if count(ConnectivityState::Ready) > 0 {
        ConnectivityState::Ready
    } else if failed >= 2 {
        ConnectivityState::TransientFailure
    } else if count(ConnectivityState::Connecting) > 0 || (failed == 1 && counts.total() > 1) {
        ConnectivityState::Connecting
    } else if count(ConnectivityState::Idle) > 0 {
        ConnectivityState::Idle
    } else {
        ConnectivityState::TransientFailure
    }
}

/// The ring_hash child of one priority.
///
/// An event costs O(log n) per subchannel it changed: each endpoint's state is kept with how many are in
/// each state and which are IDLE; the endpoints' states are listed again for a new picker
/// ([`RingHash::pick_spec`], O(n)) only after one changed.
pub(crate) struct RingHash {
    min_ring_size: u64,
    max_ring_size: u64,
    /// The endpoints (first occurrence of each address) with their subchannels and weights.
    endpoints: Vec<(SubchannelId, Address, u64)>,
    /// Each subchannel's index in `endpoints`.
    index: HashMap<SubchannelId, usize>,
    ring: Arc<[(u64, usize)]>,
    requests: ConnectRequests,
    failure: FailureNote,
    /// The endpoints' states at the last refresh.
    states: Vec<ConnectivityState>,
    /// How many endpoints are in each state.
    counts: StateCounts,
    /// The IDLE endpoints, by index.
    idle: BTreeSet<usize>,
    /// Every endpoint's state must be read again (new endpoints).
    recount: bool,
    /// The endpoints with their states, as the last picker listed them (`None` after a change).
    listed: Option<Arc<[(SubchannelId, Address, ConnectivityState)]>>,
    /// The policy was asked to leave IDLE (`exit_idle`) since the last refresh.
    woken: bool,
    /// The latest connection error among its endpoints.
    latest_error: LatestError,
}

impl RingHash {
    pub(crate) fn new(min_ring_size: u64, max_ring_size: u64) -> RingHash {
        RingHash {
            min_ring_size,
            max_ring_size,
            endpoints: Vec::new(),
            index: HashMap::new(),
            ring: Arc::from(Vec::new()),
            requests: ConnectRequests::default(),
            failure: FailureNote::default(),
            states: Vec::new(),
            counts: StateCounts::default(),
            idle: BTreeSet::new(),
            recount: true,
            listed: None,
            woken: false,
            latest_error: LatestError::default(),
        }
    }

    /// The channel asked the policy to leave IDLE (`Channel::connect`, a queued pick): the next refresh
    /// connects the first IDLE endpoint if none is READY or CONNECTING (after the picks' own requests), so
    /// that a channel waiting to be READY gets there without a call.
    pub(crate) fn exit_idle(&mut self) {
        self.woken = true;
    }

    /// Whether this child was built for these ring sizes.
    pub(crate) fn has_sizes(&self, min_ring_size: u64, max_ring_size: u64) -> bool {
        (self.min_ring_size, self.max_ring_size) == (min_ring_size, max_ring_size)
    }

    /// Applies the priority's endpoints: each address gets a subchannel (shared with any other user of the
    /// address) that is not connected here; the ring is rebuilt when the endpoints or weights changed.
    pub(crate) fn update(
        &mut self,
        config: &PriorityConfig,
        transport: Option<&TransportKey>,
        subs: &mut Subchannels,
    ) {
        let mut seen = HashSet::new();
        let mut endpoints = Vec::new();
        for l in &config.localities {
            for (i, a) in l.addresses.iter().enumerate() {
                visit(1);
                if seen.insert(a) {
                    let id = subs.find_or_add_with(a, transport);
                    let weight = u64::from(l.weight.get()) * u64::from(l.endpoint_weight(i));
                    endpoints.push((id, a.clone(), weight));
                }
            }
        }
        let same = endpoints.len() == self.endpoints.len()
            && endpoints
                .iter()
                .zip(&self.endpoints)
                .all(|((_, a, w), (_, b, v))| a == b && w == v);
        if !same {
            let keys: Vec<(String, u64)> = endpoints
                .iter()
                .map(|(_, a, w)| (a.to_string(), *w))
                .collect();
            self.ring = Arc::from(build_ring(&keys, self.min_ring_size, self.max_ring_size));
        }
        self.index = endpoints
            .iter()
            .enumerate()
            .map(|(i, (id, _, _))| (*id, i))
            .collect();
        self.endpoints = endpoints;
        self.recount = true;
    }

    /// Every endpoint's address.
    pub(crate) fn addresses(&self) -> impl Iterator<Item = &Address> {
        self.endpoints.iter().map(|(_, a, _)| a)
    }

    /// Reads endpoint `i`'s state again.
    fn recount_one(&mut self, i: usize, subs: &Subchannels, ejections: Ejections<'_>) {
        let (Some((id, _, _)), Some(old)) = (self.endpoints.get(i), self.states.get(i).copied())
        else {
            return;
        };
        self.latest_error.offer(subs, *id);
        let new = ejections.state(subs, *id);
        if new == old {
            return;
        }
        self.counts.remove(old);
        self.counts.add(new);
        if old == ConnectivityState::Idle {
            self.idle.remove(&i);
        }
        if new == ConnectivityState::Idle {
            self.idle.insert(i);
        }
        self.states[i] = new;
        self.listed = None;
    }

    /// Reads every endpoint's state again.
    fn recount_all(&mut self, subs: &Subchannels, ejections: Ejections<'_>) {
        self.states = self
            .endpoints
            .iter()
            .map(|(id, _, _)| {
                visit(1);
                self.latest_error.offer(subs, *id);
                ejections.state(subs, *id)
            })
            .collect();
        self.counts = StateCounts::default();
        self.idle.clear();
        for (i, s) in self.states.iter().enumerate() {
            self.counts.add(*s);
            if *s == ConnectivityState::Idle {
                self.idle.insert(i);
            }
        }
        self.listed = None;
    }

    /// Connects what pickers asked for and the failed endpoints whose backoff ended, reads again the
    /// states of the endpoints in `changed` and of those whose ejection changed (and of those it connects),
    /// an ejected endpoint counting as TRANSIENT_FAILURE (so picks skip it as a failed one), connects one
    /// IDLE endpoint if the rules say so, and returns the aggregate.
    pub(crate) fn refresh(
        &mut self,
        changed: &BTreeSet<SubchannelId>,
        subs: &mut Subchannels,
        ejections: Ejections<'_>,
        now: Instant,
    ) -> ConnectivityState {
        let recount = std::mem::take(&mut self.recount);
        let mut touched: Vec<usize> = Vec::new();
        for id in self.requests.take() {
            visit(1);
            if let Some(&i) = self.index.get(&id) {
                subs.connect(id, now);
                touched.push(i);
            }
        }
        // The endpoints whose backoff ended: in the endpoints' order.
        let mut retry: Vec<usize> = if recount {
            (0..self.endpoints.len()).collect()
        } else {
            changed
                .iter()
                .chain(ejections.changed())
                .filter_map(|id| {
                    visit(1);
                    self.index.get(id).copied()
                })
                .collect()
        };
        retry.sort_unstable();
        for i in retry {
            let Some((id, _, _)) = self.endpoints.get(i) else {
                continue;
            };
            let id = *id;
            let backoff_over = subs
                .get(id)
                .is_some_and(|s| s.failed_since_ready && s.state == ConnectivityState::Idle);
            if backoff_over {
                subs.connect(id, now);
            }
            touched.push(i);
        }
        if recount {
            self.recount_all(subs, ejections);
        } else {
            for i in touched {
                self.recount_one(i, subs, ejections);
            }
        }
        let state = aggregate_counts(&self.counts);
        let connecting = self.counts.count(ConnectivityState::Connecting) > 0;
        let woken = std::mem::take(&mut self.woken);
        let wanted = match state {
            ConnectivityState::TransientFailure | ConnectivityState::Connecting => true,
            ConnectivityState::Idle => woken,
            ConnectivityState::Ready | ConnectivityState::Shutdown => false,
        };
        if wanted && !connecting {
            let idle = self
                .idle
                .first()
                .and_then(|i| self.endpoints.get(*i).map(|(id, _, _)| (*i, *id)));
            if let Some((i, id)) = idle {
                subs.connect(id, now);
                self.recount_one(i, subs, ejections);
                return aggregate_counts(&self.counts);
            }
        }
        state
    }

    /// The latest connection error among its endpoints, if any.
    pub(crate) fn last_error(&self) -> Option<&str> {
        self.latest_error.message()
    }

    /// The picker's view: the ring and each endpoint's state at the last refresh; `failure` is the message
    /// of a pick that finds every endpoint failed (shared with the pickers already published, so a new
    /// message alone makes no new picker). Lists the endpoints (O(n)) only if a state changed since
    /// the last time.
    pub(crate) fn pick_spec(&mut self, failure: String) -> RingPick {
        let endpoints = match &self.listed {
            Some(listed) => listed.clone(),
            None => {
                rebuilt(self.endpoints.len());
                let listed: Arc<[(SubchannelId, Address, ConnectivityState)]> = self
                    .endpoints
                    .iter()
                    .zip(&self.states)
                    .map(|((id, a, _), s)| (*id, a.clone(), *s))
                    .collect();
                self.listed = Some(listed.clone());
                listed
            }
        };
        self.failure.set(failure);
        RingPick {
            ring: self.ring.clone(),
            endpoints,
            requests: self.requests.clone(),
            failure: self.failure.clone(),
        }
    }
}
