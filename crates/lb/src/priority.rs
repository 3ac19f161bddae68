//! The priority policy of one xDS cluster (`beyond-a6.md` §11, gRFC A56): its children are the cluster's
//! priorities (a weighted target each, `weighted_target.rs`), highest first, created lazily.
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

use std::time::{Duration, Instant};

use crate::state::ConnectivityState;
use crate::subchannel::Subchannels;
use crate::weighted_target::WeightedTarget;
use crate::xds_config::PriorityConfig;

/// How long a child may stay CONNECTING before the next priority is tried.
pub const FAILOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a deactivated child lives.
pub const DEACTIVATION_RETENTION: Duration = Duration::from_secs(15 * 60);

pub(crate) struct Child {
    pub(crate) target: WeightedTarget,
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
    configs: Vec<PriorityConfig>,
    children: Vec<Option<Child>>,
    selected: Option<usize>,
}

impl Priority {
    pub(crate) fn new() -> Priority {
        Priority {
            configs: Vec::new(),
            children: Vec::new(),
            selected: None,
        }
    }

    /// Applies a new priority list (the caller runs [`Priority::refresh`] once every cluster is updated).
    pub(crate) fn update(
        &mut self,
        configs: Vec<PriorityConfig>,
        subs: &mut Subchannels,
        now: Instant,
    ) {
        self.children.truncate(configs.len());
        self.children.resize_with(configs.len(), || None);
        for (child, config) in self.children.iter_mut().zip(&configs) {
            if let Some(child) = child {
                child.target.update(config, subs, now);
            }
        }
        self.configs = configs;
    }

    /// Recomputes the children's states (applying the timer rules) and runs the selection.
    pub(crate) fn refresh(&mut self, subs: &mut Subchannels, now: Instant) {
        for child in self.children.iter_mut().flatten() {
            if child.failover_at.is_some_and(|t| t <= now) {
                child.failover_at = None;
            }
            let state = child.target.refresh(subs);
            child.set_state(state, now);
        }
        self.select(subs, now);
    }

    fn select(&mut self, subs: &mut Subchannels, now: Instant) {
        let n = self.configs.len();
        self.selected = None;
        for p in 0..n {
            let child = match &mut self.children[p] {
                Some(child) => child,
                slot @ None => {
                    let mut target = WeightedTarget::new();
                    target.update(&self.configs[p], subs, now);
                    let mut child = Child {
                        target,
                        state: ConnectivityState::Connecting,
                        failover_at: Some(now + FAILOVER_TIMEOUT),
                        deactivated_at: None,
                        ready_or_idle_last: false,
                    };
                    let state = child.target.refresh(subs);
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
    pub(crate) fn selected(&self) -> Option<(usize, &Child)> {
        let p = self.selected?;
        self.children.get(p)?.as_ref().map(|c| (p, c))
    }

    /// The existing children (active or deactivated).
    pub(crate) fn children(&self) -> impl Iterator<Item = &Child> {
        self.children.iter().flatten()
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
    /// ended (the caller then runs [`Priority::refresh`]).
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
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
                }
            }
        }
    }
}
