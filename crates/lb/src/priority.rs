//! The priority policy of one xDS cluster (`beyond-a6.md` §11, gRFC A56): its children are the cluster's
//! priorities (a weighted target of round_robin localities each, `weighted_target.rs`, or a ring_hash over
//! all the priority's endpoints, `ring_hash.rs`, as the cluster's policy says), highest first, created
//! lazily. A change of the cluster's policy (or of its ring sizes) replaces the existing children.
//!
//! * **Failover timer, 10 s**: started when a child is created, and when it moves to CONNECTING from another
//!   state having reported READY or IDLE more recently than TRANSIENT_FAILURE; cancelled when it reports
//!   READY, IDLE or TRANSIENT_FAILURE; deactivation does not cancel it; its firing re-runs the selection.
//! * **Selection** (idempotent; run after every child state change and after a whole config update, never
//!   in the middle of one): no priorities → TRANSIENT_FAILURE "priority policy has empty priority list"; for
//!   each priority in order, create (or reactivate) its child; READY or IDLE → use it and deactivate the
//!   lower ones; failover timer pending → use it; after the loop, the first CONNECTING child, else the last
//!   priority. So a lower priority is used only while every higher one is neither READY nor IDLE and its
//!   timer has expired (or it failed).
//! * **Deactivated** children (lower than a READY/IDLE one) keep their connections for 15 minutes, then go,
//!   unless a selection reactivates them first. Children whose priority leaves the config go at once (A115,
//!   as grpc-go and grpc-java).
//!
//! Children are named by their index: after an update, priority *i* keeps the state of the old priority *i*
//! with the new localities. Not here: grpc-go's reuse of child names by locality overlap, and
//! `ignoreReresolutionRequests` (no aggregate clusters).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use grpc_base::Address;

use crate::ejections::Ejections;
use crate::ring_hash::RingHash;
use crate::state::{ConnectivityState, SubchannelId};
use crate::subchannel::Subchannels;
use crate::transport::TransportKey;
use crate::weighted_target::WeightedTarget;
use crate::xds_config::{ClusterLbConfig, PriorityConfig};

/// How long a child may stay CONNECTING before the next priority is tried.
pub const FAILOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a deactivated child lives.
pub const DEACTIVATION_RETENTION: Duration = Duration::from_secs(15 * 60);

/// The policy of one priority.
pub(crate) enum ChildPolicy {
    /// weighted_target over round_robin localities.
    RoundRobin(WeightedTarget),
    /// ring_hash over every endpoint.
    RingHash(RingHash),
}

impl ChildPolicy {
    fn new(lb: ClusterLbConfig) -> ChildPolicy {
        match lb {
            ClusterLbConfig::RoundRobin => ChildPolicy::RoundRobin(WeightedTarget::new()),
            ClusterLbConfig::RingHash {
                min_ring_size,
                max_ring_size,
            } => ChildPolicy::RingHash(RingHash::new(min_ring_size, max_ring_size)),
        }
    }

    /// Whether this child runs `lb`.
    fn runs(&self, lb: ClusterLbConfig) -> bool {
        match (self, lb) {
            (ChildPolicy::RoundRobin(_), ClusterLbConfig::RoundRobin) => true,
            (
                ChildPolicy::RingHash(r),
                ClusterLbConfig::RingHash {
                    min_ring_size,
                    max_ring_size,
                },
            ) => r.has_sizes(min_ring_size, max_ring_size),
            _ => false,
        }
    }

    fn update(
        &mut self,
        config: &PriorityConfig,
        transport: Option<&TransportKey>,
        subs: &mut Subchannels,
        now: Instant,
    ) {
        match self {
            ChildPolicy::RoundRobin(t) => t.update(config, transport, subs, now),
            ChildPolicy::RingHash(r) => r.update(config, transport, subs),
        }
    }

    fn refresh(
        &mut self,
        changed: &BTreeSet<SubchannelId>,
        subs: &mut Subchannels,
        ejections: Ejections<'_>,
        now: Instant,
    ) -> ConnectivityState {
        match self {
            ChildPolicy::RoundRobin(t) => t.refresh(changed, subs, ejections),
            ChildPolicy::RingHash(r) => r.refresh(changed, subs, ejections, now),
        }
    }

    /// Every endpoint address of the child.
    pub(crate) fn addresses(&self) -> Box<dyn Iterator<Item = &Address> + '_> {
        match self {
            ChildPolicy::RoundRobin(t) => Box::new(t.addresses()),
            ChildPolicy::RingHash(r) => Box::new(r.addresses()),
        }
    }

    /// Whether the child has an endpoint.
    pub(crate) fn has_addresses(&self) -> bool {
        self.addresses().next().is_some()
    }
}

pub(crate) struct Child {
    pub(crate) target: ChildPolicy,
    pub(crate) state: ConnectivityState,
    failover_at: Option<Instant>,
    deactivated_at: Option<Instant>,
    /// The child reported READY or IDLE more recently than TRANSIENT_FAILURE.
    ready_or_idle_last: bool,
}

impl Child {
    fn set_state(&mut self, state: ConnectivityState, now: Instant) {
        if state == self.state {
            return;
        }
        match state {
            ConnectivityState::Ready | ConnectivityState::Idle => {
                self.failover_at = None;
                self.ready_or_idle_last = true;
            }
            ConnectivityState::TransientFailure => {
                self.failover_at = None;
                self.ready_or_idle_last = false;
            }
            ConnectivityState::Connecting if self.ready_or_idle_last => {
                self.failover_at = Some(now + FAILOVER_TIMEOUT);
            }
            ConnectivityState::Connecting | ConnectivityState::Shutdown => {}
        }
        self.state = state;
    }

    fn failover_pending(&self, now: Instant) -> bool {
        self.failover_at.is_some_and(|t| t > now)
    }
}

/// The priorities of one cluster.
pub(crate) struct Priority {
    lb: ClusterLbConfig,
    /// The transport of the cluster's subchannels.
    transport: Option<TransportKey>,
    configs: Vec<PriorityConfig>,
    children: Vec<Option<Child>>,
    selected: Option<usize>,
}

impl Priority {
    pub(crate) fn new() -> Priority {
        Priority {
            lb: ClusterLbConfig::RoundRobin,
            transport: None,
            configs: Vec::new(),
            children: Vec::new(),
            selected: None,
        }
    }

    /// Applies a new priority list under the cluster's policy `lb` (the caller runs [`Priority::refresh`]
    /// once every cluster is updated). Children of another policy are dropped (recreated by the selection).
    pub(crate) fn update(
        &mut self,
        lb: ClusterLbConfig,
        transport: Option<TransportKey>,
        configs: Vec<PriorityConfig>,
        subs: &mut Subchannels,
        now: Instant,
    ) {
        self.lb = lb;
        self.transport = transport;
        for slot in &mut self.children {
            if slot.as_ref().is_some_and(|c| !c.target.runs(lb)) {
                *slot = None;
            }
        }
        self.children.truncate(configs.len());
        self.children.resize_with(configs.len(), || None);
        for (child, config) in self.children.iter_mut().zip(&configs) {
            if let Some(child) = child {
                child
                    .target
                    .update(config, self.transport.as_ref(), subs, now);
            }
        }
        self.configs = configs;
    }

    /// Recomputes the children's states from the subchannels that changed (applying the timer rules) and
    /// runs the selection.
    /// `ejections` is the cluster's own outlier ejection overlay.
    pub(crate) fn refresh(
        &mut self,
        changes: &mut Changes,
        subs: &mut Subchannels,
        ejections: Ejections<'_>,
        now: Instant,
    ) {
        for child in self.children.iter_mut().flatten() {
            if child.failover_at.is_some_and(|t| t <= now) {
                child.failover_at = None;
            }
            let state = child.target.refresh(&changes.round, subs, ejections, now);
            changes.absorb(subs);
            child.set_state(state, now);
        }
        self.select(changes, subs, ejections, now);
    }

    /// Whether a round_robin child (which keeps every endpoint connected) has subchannel `id`.
    pub(crate) fn connects_eagerly(&self, id: SubchannelId) -> bool {
        self.children.iter().flatten().any(|c| match &c.target {
            ChildPolicy::RoundRobin(t) => t.contains(id),
            ChildPolicy::RingHash(_) => false,
        })
    }

    fn select(
        &mut self,
        changes: &mut Changes,
        subs: &mut Subchannels,
        ejections: Ejections<'_>,
        now: Instant,
    ) {
        let n = self.configs.len();
        self.selected = None;
        for p in 0..n {
            let child = match &mut self.children[p] {
                Some(child) => child,
                slot @ None => {
                    let mut target = ChildPolicy::new(self.lb);
                    target.update(&self.configs[p], self.transport.as_ref(), subs, now);
                    let mut child = Child {
                        target,
                        state: ConnectivityState::Connecting,
                        failover_at: Some(now + FAILOVER_TIMEOUT),
                        deactivated_at: None,
                        ready_or_idle_last: false,
                    };
                    let state = child.target.refresh(&changes.round, subs, ejections, now);
                    changes.absorb(subs);
                    child.set_state(state, now);
                    slot.insert(child)
                }
            };
            child.deactivated_at = None;
            if matches!(
                child.state,
                ConnectivityState::Ready | ConnectivityState::Idle
            ) {
                self.selected = Some(p);
                for lower in self.children[p + 1..].iter_mut().flatten() {
                    lower.deactivated_at.get_or_insert(now);
                }
                return;
            }
            if child.failover_pending(now) {
                self.selected = Some(p);
                return;
            }
        }
        let connecting = self.children.iter().position(|c| {
            c.as_ref()
                .is_some_and(|c| c.state == ConnectivityState::Connecting)
        });
        self.selected = connecting.or(n.checked_sub(1));
    }

    /// The child in use, with its index (`None` without priorities).
    pub(crate) fn selected_mut(&mut self) -> Option<(usize, &mut Child)> {
        let p = self.selected?;
        self.children.get_mut(p)?.as_mut().map(|c| (p, c))
    }

    /// The existing children (active or deactivated).
    /// The transport of the cluster's subchannels.
    pub(crate) fn transport(&self) -> Option<&TransportKey> {
        self.transport.as_ref()
    }

    pub(crate) fn children(&self) -> impl Iterator<Item = &Child> {
        self.children.iter().flatten()
    }

    /// Tells the ring_hash children that the channel asked the policy to leave IDLE.
    pub(crate) fn exit_idle(&mut self) {
        for child in self.children.iter_mut().flatten() {
            if let ChildPolicy::RingHash(ring) = &mut child.target {
                ring.exit_idle();
            }
        }
    }

    /// The next failover timer or end of a deactivated child's retention.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.children
            .iter()
            .flatten()
            .flat_map(|c| {
                [
                    c.failover_at,
                    c.deactivated_at.map(|t| t + DEACTIVATION_RETENTION),
                ]
            })
            .flatten()
            .min()
    }

    /// Expires the failover timers due at `now` and removes the deactivated children whose retention
    /// ended (the caller then runs [`Priority::refresh`]); returns whether it removed one.
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> bool {
        let mut removed = false;
        for slot in &mut self.children {
            if let Some(child) = slot {
                if child.failover_at.is_some_and(|t| t <= now) {
                    child.failover_at = None;
                }
                if child
                    .deactivated_at
                    .is_some_and(|t| t + DEACTIVATION_RETENTION <= now)
                {
                    *slot = None;
                    removed = true;
                }
            }
        }
        removed
    }
}

/// The subchannels that changed, as one refresh of the xDS cluster manager hands them to its children:
/// those that changed before it (`round`), to which each child adds what it changed itself (a ring_hash
/// child connects endpoints), so that the children after it see it; and those changed during it
/// (`during`), which the children before it see at the next refresh.
#[derive(Default)]
pub(crate) struct Changes {
    pub(crate) round: BTreeSet<SubchannelId>,
    pub(crate) during: BTreeSet<SubchannelId>,
}

impl Changes {
    /// Takes what the subchannels record as changed since the last look.
    pub(crate) fn absorb(&mut self, subs: &mut Subchannels) {
        let changed = subs.take_changed();
        if !changed.is_empty() {
            self.round.extend(changed.iter().copied());
            self.during.extend(changed);
        }
    }
}
