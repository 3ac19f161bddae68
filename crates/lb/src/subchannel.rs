//! Subchannels: one per address, each with its connectivity state and connection backoff. The policy owns a
//! [`Subchannels`] registry; the channel performs the connection attempts it asks for and reports back.
//!
//! ```text
//!   IDLE ──connect──▶ CONNECTING ──SETTINGS received──▶ READY
//!    ▲                    │                               │
//!    │           failure / 20 s+ deadline          connection lost
//!    │                    ▼                               │
//!    └── backoff over ── TRANSIENT_FAILURE                └──▶ IDLE
//! ```
//! A subchannel reports TRANSIENT_FAILURE while it backs off and IDLE when the backoff ends (A61); the
//! policy then decides whether to connect again.
//!
//! Ejection (outlier detection, gRFC A50) is an overlay on these states, not a state of its own: the
//! registry keeps the set of ejected addresses, and a subchannel of an ejected address looks
//! TRANSIENT_FAILURE to its policy ([`Subchannels::state`]) while its real state goes on underneath
//! ([`Subchannels::real_state`]); its connection stays open. Un-ejected, it shows its real state again. A
//! subchannel created for an address that is already ejected starts ejected.
//!
//! Health (gRFC A17, `health.rs`) is a second overlay, kept per subchannel because it belongs to its current
//! connection: with health checking on, a READY subchannel whose health is not `Serving` looks CONNECTING
//! (`Unknown`) or TRANSIENT_FAILURE (`NotServing`). Ejection wins over it. Health is `Unknown` whenever the
//! subchannel is not READY.

use std::collections::{HashSet, VecDeque};
use std::time::Instant;

use grpc_base::{Address, Rng};

use crate::backoff::{BackoffConfig, ConnectionBackoff};
use crate::health::Health;
use crate::picker::PickerSpec;
use crate::state::ConnectivityState;

/// Identifies a subchannel for the life of its policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubchannelId(pub u64);

/// What the channel must do for the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LbAction {
    /// Start a connection attempt to `addr` for subchannel `id`; give up at `deadline`, and report the result
    /// with `subchannel_ready` (once the server's SETTINGS arrived) or `subchannel_failed`.
    Connect {
        /// The subchannel.
        id: SubchannelId,
        /// Its address.
        addr: Address,
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

#[derive(Debug)]
pub(crate) struct Subchannel {
    pub(crate) id: SubchannelId,
    pub(crate) addr: Address,
    pub(crate) state: ConnectivityState,
    backoff: ConnectionBackoff,
    next_start: Option<Instant>,
    connect_deadline: Option<Instant>,
    idle_at: Option<Instant>,
    /// Failed since it was last READY (round_robin reports such a subchannel as TRANSIENT_FAILURE).
    pub(crate) failed_since_ready: bool,
    /// The health of its current connection (`Unknown` unless READY).
    pub(crate) health: Health,
}

/// A state change a timer caused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimerEvent {
    /// The backoff ended: TRANSIENT_FAILURE → IDLE.
    BackoffOver(SubchannelId),
    /// The attempt's deadline passed: CONNECTING → TRANSIENT_FAILURE.
    ConnectTimedOut(SubchannelId),
}

/// The subchannels of one policy, and the actions they produce.
pub(crate) struct Subchannels {
    list: Vec<Subchannel>,
    next_id: u64,
    config: BackoffConfig,
    pub(crate) rng: Box<dyn Rng>,
    pub(crate) out: VecDeque<LbAction>,
    pub(crate) last_error: Option<String>,
    /// Addresses outlier detection ejected.
    ejected: HashSet<Address>,
    /// Whether the health overlay applies (only a policy that health checks turns it on).
    pub(crate) health_checking: bool,
}

impl Subchannels {
    pub(crate) fn new(config: BackoffConfig, rng: Box<dyn Rng>) -> Subchannels {
        Subchannels {
            list: Vec::new(),
            next_id: 0,
            config,
            rng,
            out: VecDeque::new(),
            last_error: None,
            ejected: HashSet::new(),
            health_checking: false,
        }
    }

    pub(crate) fn get(&self, id: SubchannelId) -> Option<&Subchannel> {
        self.list.iter().find(|s| s.id == id)
    }

    fn get_mut(&mut self, id: SubchannelId) -> Option<&mut Subchannel> {
        self.list.iter_mut().find(|s| s.id == id)
    }

    pub(crate) fn find(&self, addr: &Address) -> Option<SubchannelId> {
        self.list.iter().find(|s| s.addr == *addr).map(|s| s.id)
    }

    /// The state the policy sees: TRANSIENT_FAILURE while the subchannel's address is ejected; with health
    /// checking on, a READY subchannel not `Serving` looks CONNECTING (`Unknown`) or TRANSIENT_FAILURE
    /// (`NotServing`); its real state otherwise (SHUTDOWN once removed).
    pub(crate) fn state(&self, id: SubchannelId) -> ConnectivityState {
        match self.get(id) {
            None => ConnectivityState::Shutdown,
            Some(s) if self.ejected.contains(&s.addr) => ConnectivityState::TransientFailure,
            Some(s) if self.health_checking && s.state == ConnectivityState::Ready => {
                match s.health {
                    Health::Serving => ConnectivityState::Ready,
                    Health::Unknown => ConnectivityState::Connecting,
                    Health::NotServing => ConnectivityState::TransientFailure,
                }
            }
            Some(s) => s.state,
        }
    }

    /// The health of `addr`'s subchannel's connection (`None` without a subchannel for it).
    pub(crate) fn health(&self, addr: &Address) -> Option<Health> {
        self.find(addr)
            .and_then(|id| self.get(id))
            .map(|s| s.health)
    }

    /// Records the health of `addr`'s subchannel's connection. Ignored (returns false) without a subchannel
    /// for `addr` or if it is not READY (a late answer from a connection already gone); returns whether the
    /// health changed. A `NotServing` answer becomes the error the failing picker reports.
    pub(crate) fn set_health(&mut self, addr: &Address, health: Health) -> bool {
        let Some(s) = self.list.iter_mut().find(|s| s.addr == *addr) else {
            return false;
        };
        if s.state != ConnectivityState::Ready || s.health == health {
            return false;
        }
        s.health = health;
        if health == Health::NotServing {
            self.last_error = Some(format!("{}: health check: not serving", s.addr));
        }
        true
    }

    /// The subchannel's real state, ejected or not (SHUTDOWN once removed).
    pub(crate) fn real_state(&self, id: SubchannelId) -> ConnectivityState {
        self.get(id)
            .map_or(ConnectivityState::Shutdown, |s| s.state)
    }

    /// Whether subchannel `id`'s address is ejected.
    pub(crate) fn is_ejected(&self, id: SubchannelId) -> bool {
        self.get(id).is_some_and(|s| self.ejected.contains(&s.addr))
    }

    /// Whether `addr` is ejected.
    pub(crate) fn is_address_ejected(&self, addr: &Address) -> bool {
        self.ejected.contains(addr)
    }

    /// Ejects `addr` (or lifts its ejection). Returns whether that changed anything. An ejection becomes
    /// the error the failing picker reports.
    pub(crate) fn set_ejected(&mut self, addr: &Address, ejected: bool) -> bool {
        if ejected {
            let changed = self.ejected.insert(addr.clone());
            if changed {
                self.last_error = Some(format!("{addr}: ejected by outlier detection"));
            }
            changed
        } else {
            self.ejected.remove(addr)
        }
    }

    pub(crate) fn add(&mut self, addr: Address) -> SubchannelId {
        let id = SubchannelId(self.next_id);
        self.next_id += 1;
        self.list.push(Subchannel {
            id,
            addr,
            state: ConnectivityState::Idle,
            backoff: ConnectionBackoff::new(self.config),
            next_start: None,
            connect_deadline: None,
            idle_at: None,
            failed_since_ready: false,
            health: Health::Unknown,
        });
        id
    }

    /// Makes the subchannels match `addresses` (in order, without duplicates): keeps those whose address
    /// stays, adds the new ones (IDLE), removes the rest. Returns the ids in order.
    pub(crate) fn sync(&mut self, addresses: &[Address]) -> Vec<SubchannelId> {
        let mut order = Vec::with_capacity(addresses.len());
        for addr in addresses {
            let id = self.find(addr).unwrap_or_else(|| self.add(addr.clone()));
            if !order.contains(&id) {
                order.push(id);
            }
        }
        let stale: Vec<SubchannelId> = self.ids().filter(|id| !order.contains(id)).collect();
        for id in stale {
            self.remove(id);
        }
        order
    }

    /// Removes a subchannel, closing its connection or attempt.
    pub(crate) fn remove(&mut self, id: SubchannelId) {
        if let Some(i) = self.list.iter().position(|s| s.id == id) {
            let s = self.list.remove(i);
            if matches!(
                s.state,
                ConnectivityState::Connecting | ConnectivityState::Ready
            ) {
                self.out.push_back(LbAction::Disconnect { id });
            }
        }
    }

    /// Closes a subchannel's connection but keeps it (IDLE), e.g. the losers of pick_first's race.
    pub(crate) fn disconnect(&mut self, id: SubchannelId) {
        if let Some(s) = self.get_mut(id) {
            if matches!(
                s.state,
                ConnectivityState::Connecting | ConnectivityState::Ready
            ) {
                s.state = ConnectivityState::Idle;
                s.connect_deadline = None;
                s.health = Health::Unknown;
                self.out.push_back(LbAction::Disconnect { id });
            }
        }
    }

    /// Starts an attempt if the subchannel is IDLE. Returns whether it did.
    pub(crate) fn connect(&mut self, id: SubchannelId, now: Instant) -> bool {
        let Some(i) = self.list.iter().position(|s| s.id == id) else {
            return false;
        };
        if self.list[i].state != ConnectivityState::Idle {
            return false;
        }
        let (next_start, deadline) = self.list[i].backoff.attempt(now, self.rng.as_mut());
        let s = &mut self.list[i];
        s.state = ConnectivityState::Connecting;
        s.next_start = Some(next_start);
        s.connect_deadline = Some(deadline);
        self.out.push_back(LbAction::Connect {
            id,
            addr: s.addr.clone(),
            deadline,
        });
        true
    }

    /// The server's SETTINGS arrived. Returns whether the subchannel was CONNECTING.
    pub(crate) fn ready(&mut self, id: SubchannelId) -> bool {
        let Some(s) = self.get_mut(id) else {
            return false;
        };
        if s.state != ConnectivityState::Connecting {
            return false;
        }
        s.state = ConnectivityState::Ready;
        s.connect_deadline = None;
        s.failed_since_ready = false;
        s.health = Health::Unknown;
        s.backoff.reset();
        true
    }

    /// The attempt failed: TRANSIENT_FAILURE until the attempt's backoff deadline. Returns whether it was
    /// CONNECTING.
    pub(crate) fn failed(&mut self, id: SubchannelId, error: String, now: Instant) -> bool {
        let Some(s) = self.get_mut(id) else {
            return false;
        };
        if s.state != ConnectivityState::Connecting {
            return false;
        }
        s.state = ConnectivityState::TransientFailure;
        s.connect_deadline = None;
        s.failed_since_ready = true;
        s.idle_at = Some(s.next_start.unwrap_or(now).max(now));
        self.last_error = Some(format!("{}: {error}", s.addr));
        true
    }

    /// The READY connection closed: IDLE. Returns whether it was READY.
    pub(crate) fn closed(&mut self, id: SubchannelId) -> bool {
        let Some(s) = self.get_mut(id) else {
            return false;
        };
        if s.state != ConnectivityState::Ready {
            return false;
        }
        s.state = ConnectivityState::Idle;
        s.health = Health::Unknown;
        true
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.list
            .iter()
            .filter_map(|s| match s.state {
                ConnectivityState::TransientFailure => s.idle_at,
                ConnectivityState::Connecting => s.connect_deadline,
                _ => None,
            })
            .min()
    }

    /// Fires the subchannel timers due at `now`.
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Vec<TimerEvent> {
        let mut events = Vec::new();
        for s in &mut self.list {
            match s.state {
                ConnectivityState::TransientFailure if s.idle_at.is_some_and(|t| t <= now) => {
                    s.state = ConnectivityState::Idle;
                    s.idle_at = None;
                    events.push(TimerEvent::BackoffOver(s.id));
                }
                ConnectivityState::Connecting if s.connect_deadline.is_some_and(|t| t <= now) => {
                    events.push(TimerEvent::ConnectTimedOut(s.id));
                }
                _ => {}
            }
        }
        for e in &events {
            if let TimerEvent::ConnectTimedOut(id) = e {
                self.out.push_back(LbAction::Disconnect { id: *id });
                self.failed(*id, "connection attempt timed out".to_owned(), now);
            }
        }
        events
    }

    pub(crate) fn ids(&self) -> impl Iterator<Item = SubchannelId> + '_ {
        self.list.iter().map(|s| s.id)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Subchannel> {
        self.list.iter()
    }
}
