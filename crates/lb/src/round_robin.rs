//! round_robin: a backend per endpoint (gRFC A61: round_robin balances over endpoints, not over their
//! addresses), every one kept connected (reconnecting as soon as its backoff ends), picks rotating over the
//! READY ones from a random start. Each address has its subchannel (outlier detection and health are per
//! address), and a backend uses its endpoint's addresses in order, as pick_first would: it connects the
//! first, and after a failure the next (wrapping round); the one that is READY takes the endpoint's picks,
//! and only one address of an endpoint is connected or connecting at a time. A single-address endpoint is
//! one subchannel, as before. The aggregate state is READY if any is
//! READY, else CONNECTING if any is, else IDLE if any is, else TRANSIENT_FAILURE; a subchannel that failed
//! since it was last READY counts as TRANSIENT_FAILURE while it reconnects (A61's sticky children).
//! A failed or lost connection asks for re-resolution.
//!
//! An ejected subchannel (outlier detection) counts as TRANSIENT_FAILURE and takes no picks; it keeps its
//! connection, and keeps reconnecting if that closes, so that it is READY again the moment it returns.
//!
//! With health checking on (gRFC A17), a READY backend takes picks only while its health is `Serving`: until
//! the first answer it counts as CONNECTING, while `NotServing` as TRANSIENT_FAILURE, and its connection
//! stays open either way. Ejection wins over health.
//!
//! Each backend's state is counted as it changes: an event (a subchannel event, a health answer, an
//! ejection) looks at the subchannels it changed only, and a new picker is built (over every backend)
//! only when the READY backends or the aggregate state changed, so bringing n backends up does O(n log n)
//! work besides the pickers.

use std::collections::HashMap;
use std::time::Instant;

use grpc_base::Address;

use crate::action::{LbAction, TimerEvent};
use crate::picker::PickerSpec;
use crate::state::{ConnectivityState, SubchannelId};
use crate::subchannel::{StateCounts, Subchannels};
use crate::work::{rebuilt, visit};

/// What round_robin counted of one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counted {
    /// The state it counts as in the aggregate ([`effective_state`]).
    state: ConnectivityState,
    /// Its connection is READY (ejected or not, serving or not).
    connected: bool,
}

/// One endpoint: its addresses' subchannels, which one it uses, and how that one counted.
#[derive(Debug)]
struct Backend {
    /// The endpoint's subchannels, in its address order (one for a single-address endpoint).
    subchannels: Vec<(SubchannelId, Address)>,
    /// The one in use (`subchannels[active]`): the first, then the next after a failure.
    active: usize,
    /// How the one in use counted.
    counted: Counted,
}

impl Backend {
    fn id(&self) -> SubchannelId {
        self.subchannels[self.active].0
    }
}

pub(crate) struct RoundRobin {
    pub(crate) subs: Subchannels,
    /// The backends (endpoints) in the resolver's order, each as last counted: an event looks at the
    /// subchannels it changed only, so that its work does not grow with the number of backends (a new
    /// picker, built when the READY backends change, is the exception).
    backends: Vec<Backend>,
    /// Each subchannel's backend (its index in `backends`).
    index: HashMap<SubchannelId, usize>,
    /// How many backends count in each state.
    states: StateCounts,
    /// How many backends have a READY connection.
    connected: usize,
    /// The READY backends changed since the last READY picker was built.
    ready_changed: bool,
    published: Option<(ConnectivityState, PickerSpec)>,
}

impl RoundRobin {
    pub(crate) fn new(mut subs: Subchannels) -> RoundRobin {
        subs.track_changes();
        RoundRobin {
            subs,
            backends: Vec::new(),
            index: HashMap::new(),
            states: StateCounts::default(),
            connected: 0,
            ready_changed: false,
            published: None,
        }
    }

    pub(crate) fn state(&self) -> ConnectivityState {
        self.published
            .as_ref()
            .map_or(ConnectivityState::Idle, |(s, _)| *s)
    }

    /// How backend `id` counts now.
    fn count_of(&self, id: SubchannelId) -> Counted {
        Counted {
            state: effective_state(&self.subs, id),
            connected: self.subs.real_state(id) == ConnectivityState::Ready,
        }
    }

    fn add(&mut self, c: Counted) {
        self.states.add(c.state);
        self.connected += usize::from(c.connected);
    }

    fn subtract(&mut self, c: Counted) {
        self.states.remove(c.state);
        self.connected -= usize::from(c.connected);
    }

    /// Counts every backend afresh (a new address list).
    fn count_all(&mut self) {
        self.subs.take_changed();
        self.states = StateCounts::default();
        self.connected = 0;
        for i in 0..self.backends.len() {
            visit(1);
            let c = self.count_of(self.backends[i].id());
            self.backends[i].counted = c;
            self.add(c);
        }
        self.ready_changed = true;
    }

    /// Counts again the backends whose subchannels changed.
    fn count_changed(&mut self) {
        for id in self.subs.take_changed() {
            visit(1);
            let Some(&i) = self.index.get(&id) else {
                continue;
            };
            // An address of the endpoint that is not in use counts for nothing.
            if self.backends[i].id() == id {
                self.recount(i);
            }
        }
    }

    /// Counts backend `i` again (its subchannel in use).
    fn recount(&mut self, i: usize) {
        let old = self.backends[i].counted;
        let new = self.count_of(self.backends[i].id());
        if new != old {
            self.subtract(old);
            self.add(new);
            self.backends[i].counted = new;
            if (old.state == ConnectivityState::Ready) != (new.state == ConnectivityState::Ready) {
                self.ready_changed = true;
            }
        }
    }

    /// Subchannel `id` failed (or its attempt timed out): if it is the one its multi-address endpoint
    /// uses, the endpoint goes on to its next address, connected now (or when its backoff ends).
    fn next_address(&mut self, id: SubchannelId, now: Instant) {
        let Some(&i) = self.index.get(&id) else {
            return;
        };
        let b = &mut self.backends[i];
        if b.subchannels.len() < 2 || b.id() != id {
            return;
        }
        b.active = (b.active + 1) % b.subchannels.len();
        let next = b.id();
        self.subs.connect(next, now);
        self.recount(i);
    }

    /// Whether `id` is the subchannel its endpoint uses (the only one round_robin connects).
    fn in_use(&self, id: SubchannelId) -> bool {
        self.index
            .get(&id)
            .is_some_and(|&i| self.backends[i].id() == id)
    }

    fn recompute(&mut self) {
        self.count_changed();
        let state = self.states.aggregate();
        let picker = match state {
            ConnectivityState::Ready => {
                let unchanged = !self.ready_changed
                    && matches!(self.published, Some((ConnectivityState::Ready, _)));
                if unchanged {
                    return;
                }
                self.ready_changed = false;
                rebuilt(self.backends.len());
                let ready: Vec<(SubchannelId, Address)> = self
                    .backends
                    .iter()
                    .filter(|b| b.counted.state == ConnectivityState::Ready)
                    .map(|b| b.subchannels[b.active].clone())
                    .collect();
                PickerSpec::Ready(ready)
            }
            ConnectivityState::TransientFailure => {
                // Connected backends that are ejected or not serving are not connection failures.
                PickerSpec::Fail(format!(
                    "{}; last error: {}",
                    if self.connected > 0 {
                        "no address is usable"
                    } else {
                        "failed to connect to all addresses"
                    },
                    self.subs
                        .last_error
                        .as_deref()
                        .unwrap_or("the resolver returned no addresses")
                ))
            }
            _ => PickerSpec::Queue,
        };
        let next = (state, picker);
        if self.published.as_ref() != Some(&next) {
            self.subs.out.push_back(LbAction::UpdatePicker {
                state: next.0,
                picker: next.1.clone(),
            });
            self.published = Some(next);
        }
    }

    /// Connects every backend that is IDLE (the subchannel it uses).
    fn connect_idle(&mut self, now: Instant) {
        if self.subs.count(ConnectivityState::Idle) == 0 {
            return;
        }
        for i in 0..self.backends.len() {
            visit(1);
            let id = self.backends[i].id();
            self.subs.connect(id, now);
        }
    }

    /// New endpoints, each its addresses in order. An address in two endpoints belongs to the first; an
    /// endpoint left with none is skipped. An endpoint keeps using an address that is connected or
    /// connecting; otherwise it starts at its first.
    pub(crate) fn update(&mut self, endpoints: Vec<Vec<Address>>, now: Instant) {
        let all: Vec<Address> = endpoints.iter().flatten().cloned().collect();
        self.subs.sync(&all);
        let unknown = Counted {
            state: ConnectivityState::Shutdown,
            connected: false,
        };
        let mut index = HashMap::with_capacity(all.len());
        let mut backends = Vec::with_capacity(endpoints.len());
        for addresses in endpoints {
            let i = backends.len();
            let subchannels: Vec<(SubchannelId, Address)> = addresses
                .into_iter()
                .filter_map(|addr| self.subs.find(&addr).map(|id| (id, addr)))
                .filter(|(id, _)| match index.entry(*id) {
                    std::collections::hash_map::Entry::Occupied(_) => false,
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(i);
                        true
                    }
                })
                .collect();
            if subchannels.is_empty() {
                continue;
            }
            let active = subchannels
                .iter()
                .position(|(id, _)| {
                    matches!(
                        self.subs.real_state(*id),
                        ConnectivityState::Ready | ConnectivityState::Connecting
                    )
                })
                .unwrap_or(0);
            backends.push(Backend {
                subchannels,
                active,
                counted: unknown,
            });
        }
        self.backends = backends;
        self.index = index;
        self.connect_idle(now);
        self.count_all();
        self.recompute();
    }

    pub(crate) fn exit_idle(&mut self, now: Instant) {
        self.connect_idle(now);
        self.recompute();
    }

    pub(crate) fn subchannel_ready(&mut self, id: SubchannelId, _now: Instant) {
        if self.subs.ready(id) {
            self.recompute();
        }
    }

    pub(crate) fn subchannel_failed(&mut self, id: SubchannelId, error: String, now: Instant) {
        if self.subs.failed(id, error, now) {
            self.subs.out.push_back(LbAction::ResolveNow);
            self.next_address(id, now);
            self.recompute();
        }
    }

    pub(crate) fn subchannel_closed(&mut self, id: SubchannelId, now: Instant) {
        if self.subs.closed(id) {
            self.subs.out.push_back(LbAction::ResolveNow);
            if self.in_use(id) {
                self.subs.connect(id, now);
            }
            self.recompute();
        }
    }

    /// Outlier detection ejected `addr`, or returned it: the picker follows.
    pub(crate) fn ejection_changed(&mut self, _addr: &Address, _now: Instant) {
        self.recompute();
    }

    /// Health checking was turned on or off, or a backend's health changed: the picker follows.
    pub(crate) fn health_changed(&mut self) {
        self.recompute();
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.subs.poll_timeout()
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        for event in self.subs.handle_timeout(now) {
            match event {
                TimerEvent::BackoffOver(id) => {
                    if self.in_use(id) {
                        self.subs.connect(id, now);
                    }
                }
                TimerEvent::ConnectTimedOut(id) => {
                    self.subs.out.push_back(LbAction::ResolveNow);
                    self.next_address(id, now);
                }
            }
        }
        self.recompute();
    }
}

/// The state a round_robin backend counts as in the aggregate: the overlays (ejection, health) of
/// `Subchannels::state`, and TRANSIENT_FAILURE while it reconnects after a failure. The xDS localities use
/// the same rule.
pub(crate) fn effective_state(subs: &Subchannels, id: SubchannelId) -> ConnectivityState {
    match subs.get(id) {
        Some(s) if s.failed_since_ready && s.state != ConnectivityState::Ready => {
            ConnectivityState::TransientFailure
        }
        _ => subs.state(id),
    }
}
