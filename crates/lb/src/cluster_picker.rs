//! The xDS cluster manager's picker (`beyond-a6.md` §6, §8, §11, §12): it dispatches a call on its cluster
//! ([`PickRequest::cluster`]); for that cluster it applies the EDS `drop_overloads` (a draw in [0, 10⁶) per
//! category), then the circuit breaker (in-flight calls against `max_requests`, A32), then the chosen
//! priority's picker: READY → a weighted-random READY locality, then round_robin within it honouring the
//! avoid hint; CONNECTING → queue; IDLE → queue and wake the policy; TRANSIENT_FAILURE → fail with the
//! cluster's message. A ring_hash priority has its ring picker whatever its state (`ring_pick.rs`), fed the
//! call's request hash ([`PickRequest::hash`]; a call without one gets a random hash). A cluster the picker does not know fails (UNAVAILABLE-style message), as a call
//! without a cluster does. Drops and the breaker apply whatever the priority's state (C-core's order; grpc-go
//! applies drops only while the child is READY); a pick that does not end on a connection holds no claim.
//! A limit of 0 drops every call.
//!
//! Randomness is a SplitMix64 sequence over an atomic seeded with the picker's `start`, so picks stay
//! lock-free and tests are deterministic. Drops are [`PickResult::Drop`] (never retried, never queued). The
//! in-flight count lives in a [`InFlightCounter`] the policy keeps per cluster across pickers and config
//! updates; a successful pick hands out a [`crate::BreakerClaim`] that releases its claim when dropped.
//!
//! Not here: process-wide counters shared by channels (A32 keys them by cluster and EDS service name; each
//! policy has its own), load reporting of drops (LRS), and steering the locality choice with the avoid hint
//! (it applies within the chosen locality only).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use grpc_base::Address;

use crate::pick::{InFlightCounter, PickRequest, PickResult, Rotation};
use crate::ring_pick::{RingPick, RingPicker};
use crate::state::SubchannelId;
use crate::xds_config::{DropOverload, MILLION};

/// What picks for one cluster do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterPickerSpec {
    /// What the cluster's chosen priority says.
    pub state: ClusterPick,
    /// EDS drops, applied first.
    pub drops: Vec<DropOverload>,
    /// The circuit-breaking limit.
    pub max_requests: u32,
    /// The cluster's in-flight count (the same counter in every picker of the cluster).
    pub in_flight: InFlightCounter,
}

/// The state of a cluster's chosen priority, as picks see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterPick {
    /// IDLE: queue the call and wake the policy.
    Idle,
    /// CONNECTING: queue the call.
    Queue,
    /// TRANSIENT_FAILURE: fail fail-fast calls with this message.
    Fail(String),
    /// READY: the READY localities, each with its weight and READY subchannels.
    Ready(Vec<ReadyLocality>),
    /// A ring_hash priority (A42), in any state: its ring and endpoints.
    Ring(RingPick),
    /// An aggregate cluster (A37, A75): its leaf clusters in priority order; a call goes to the first
    /// leaf that is READY (or a ring), queues while the first leaf not failing connects, and skips the
    /// failing ones (see [`crate::ClusterConfig::leaves`]). The aggregate's own drops and breaker are not
    /// applied: the serving leaf's are.
    Aggregate(Vec<String>),
}

/// A READY locality in a picker spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyLocality {
    /// Its weight (> 0).
    pub weight: u32,
    /// Its READY subchannels.
    pub subchannels: Vec<(SubchannelId, Address)>,
}

enum State<T> {
    Idle,
    Queue,
    Fail(String),
    /// Localities with the running sum of the weights up to and including each.
    Ready(Vec<(u64, Rotation<T>)>),
    Ring(RingPicker<T>),
    Aggregate(Vec<String>),
}

struct Cluster<T> {
    state: State<T>,
    drops: Vec<(String, u32)>,
    max_requests: u32,
    in_flight: InFlightCounter,
}

/// The per-cluster picker.
pub(crate) struct ClustersPicker<T> {
    clusters: HashMap<String, Cluster<T>>,
    rng: AtomicU64,
}

const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

impl<T> ClustersPicker<T> {
    pub(crate) fn new(
        spec: &BTreeMap<String, ClusterPickerSpec>,
        handle: &impl Fn(SubchannelId, Option<&str>) -> Option<T>,
        start: usize,
    ) -> ClustersPicker<T> {
        let clusters = spec
            .iter()
            .map(|(name, c)| {
                let handle = |id| handle(id, Some(name));
                let state = match &c.state {
                    ClusterPick::Idle => State::Idle,
                    ClusterPick::Queue => State::Queue,
                    ClusterPick::Fail(m) => State::Fail(m.clone()),
                    ClusterPick::Ring(ring) => State::Ring(RingPicker::new(ring, &handle)),
                    ClusterPick::Aggregate(leaves) => State::Aggregate(leaves.clone()),
                    ClusterPick::Ready(localities) => {
                        let mut total = 0u64;
                        let mut ready = Vec::with_capacity(localities.len());
                        for l in localities {
                            let backends: Vec<(Address, T)> = l
                                .subchannels
                                .iter()
                                .filter_map(|(id, addr)| handle(*id).map(|h| (addr.clone(), h)))
                                .collect();
                            if let Some(rotation) = Rotation::new(backends, start) {
                                total += u64::from(l.weight.max(1));
                                ready.push((total, rotation));
                            }
                        }
                        if ready.is_empty() {
                            State::Queue
                        } else {
                            State::Ready(ready)
                        }
                    }
                };
                let cluster = Cluster {
                    state,
                    drops: c
                        .drops
                        .iter()
                        .map(|d| (d.category.clone(), d.per_million))
                        .collect(),
                    max_requests: c.max_requests,
                    in_flight: c.in_flight.clone(),
                };
                (name.clone(), cluster)
            })
            .collect();
        ClustersPicker {
            clusters,
            rng: AtomicU64::new(start as u64),
        }
    }

    /// A uniform draw in [0, n) (SplitMix64 over the atomic state).
    fn draw(&self, n: u64) -> u64 {
        let mut z = self
            .rng
            .fetch_add(GAMMA, Ordering::Relaxed)
            .wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((u128::from(z) * u128::from(n)) >> 64) as u64
    }

    /// A uniform 64-bit draw.
    fn draw_u64(&self) -> u64 {
        (self.draw(1 << 32) << 32) | self.draw(1 << 32)
    }

    /// The READY addresses of every cluster.
    pub(crate) fn ready_addresses(&self) -> Vec<Address> {
        let mut seen = HashSet::new();
        self.clusters
            .values()
            .flat_map(|c| -> Box<dyn Iterator<Item = &Address> + '_> {
                match &c.state {
                    State::Ready(l) => Box::new(l.iter().flat_map(|(_, r)| r.addresses())),
                    State::Ring(r) => Box::new(r.ready_addresses()),
                    _ => Box::new(std::iter::empty()),
                }
            })
            .filter(|a| seen.insert(*a))
            .cloned()
            .collect()
    }
}

impl<T: Clone> ClustersPicker<T> {
    pub(crate) fn pick(&self, request: &PickRequest<'_>) -> PickResult<T> {
        let Some(name) = request.cluster else {
            return PickResult::Fail("the call has no xDS cluster".to_owned());
        };
        let Some(cluster) = self.clusters.get(name) else {
            return PickResult::Fail(format!("cluster {name} is not known to the channel"));
        };
        let State::Aggregate(leaves) = &cluster.state else {
            return self.pick_in(cluster, request);
        };
        // A75: the first leaf that can take the call serves it, under its own drops and breaker.
        let mut last = None;
        for leaf in leaves {
            let Some(c) = self.clusters.get(leaf) else {
                continue;
            };
            match &c.state {
                State::Aggregate(_) => continue,
                State::Fail(m) => last = Some(m.clone()),
                State::Ring(_) => match self.pick_in(c, request) {
                    PickResult::Fail(m) => last = Some(m),
                    other => return other,
                },
                State::Idle | State::Queue | State::Ready(_) => return self.pick_in(c, request),
            }
        }
        PickResult::Fail(format!(
            "aggregate cluster {name}: no leaf cluster can take the call; last error: {}",
            last.as_deref().unwrap_or("no leaf cluster")
        ))
    }

    /// A pick in the leaf (or plain) cluster `cluster`: its drops, its breaker, its priority's picker.
    fn pick_in(&self, cluster: &Cluster<T>, request: &PickRequest<'_>) -> PickResult<T> {
        for (category, per_million) in &cluster.drops {
            if self.draw(u64::from(MILLION)) < u64::from(*per_million) {
                return PickResult::Drop(format!("EDS-configured drop: {category}"));
            }
        }
        if cluster.in_flight.in_flight() >= u64::from(cluster.max_requests) {
            return PickResult::Drop("circuit breaker drop".to_owned());
        }
        match &cluster.state {
            State::Idle => PickResult::Queue { exit_idle: true },
            State::Queue => PickResult::Queue { exit_idle: false },
            State::Fail(m) => PickResult::Fail(m.clone()),
            State::Aggregate(_) => {
                PickResult::Fail("an aggregate cluster's leaf is an aggregate".to_owned())
            }
            State::Ring(ring) => {
                let hash = request.hash.unwrap_or_else(|| self.draw_u64());
                match ring.pick(hash) {
                    PickResult::Pick { handle, addr, .. } => {
                        match cluster.in_flight.try_claim(cluster.max_requests) {
                            Some(guard) => PickResult::Pick {
                                handle,
                                addr,
                                guard: Some(guard.into()),
                            },
                            None => PickResult::Drop("circuit breaker drop".to_owned()),
                        }
                    }
                    other => other,
                }
            }
            State::Ready(localities) => {
                let Some(guard) = cluster.in_flight.try_claim(cluster.max_requests) else {
                    return PickResult::Drop("circuit breaker drop".to_owned());
                };
                let total = localities.last().map_or(0, |(end, _)| *end);
                let draw = self.draw(total);
                // The first locality whose running sum of weights passes the draw (a binary search).
                let chosen = localities
                    .get(localities.partition_point(|(end, _)| *end <= draw))
                    .or(localities.last());
                let Some((_, rotation)) = chosen else {
                    return PickResult::Queue { exit_idle: false };
                };
                let (addr, handle) = rotation.pick(request.avoid);
                PickResult::Pick {
                    handle: handle.clone(),
                    addr: addr.clone(),
                    guard: Some(guard.into()),
                }
            }
        }
    }
}
