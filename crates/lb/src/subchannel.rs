//! Subchannels: one per (address, transport), each with its connectivity state and connection backoff. The policy owns a
//! [`Subchannels`] registry; the channel performs the connection attempts it asks for and reports back.
//!
//! ```text
//!   IDLE ──connect──▶ CONNECTING ──SETTINGS received──▶ READY
//!    ▲                    │                               │
//!    │           failure / 20 s+ deadline          connection lost
//!    │                    ▼                               │
//!    └── backoff over ── TRANSIENT_FAILURE                └──▶ IDLE
//! ```
//! A subchannel's identity is its address and its [`TransportKey`] (`None`: the channel's own transport):
//! one address used with two transports has two subchannels, which never share a connection.
//! [`Subchannels::find`] and [`Subchannels::find_or_add`] are the channel's own transport's.
//!
//! A subchannel reports TRANSIENT_FAILURE while it backs off and IDLE when the backoff ends (A61); the
//! policy then decides whether to connect again.
//!
//! Ejection (outlier detection, gRFC A50) is an overlay on these states, not a state of its own: the
//! registry keeps the set of ejected addresses, and a subchannel of an ejected address looks
//! TRANSIENT_FAILURE to its policy (whatever its transport: ejection is per address) ([`Subchannels::state`]) while its real state goes on underneath
//! ([`Subchannels::real_state`]); its connection stays open. Un-ejected, it shows its real state again. A
//! subchannel created for an address that is already ejected starts ejected.
//!
//! Health (gRFC A17, `health.rs`) is a second overlay, kept per subchannel because it belongs to its current
//! connection: with health checking on, a READY subchannel whose health is not `Serving` looks CONNECTING
//! (`Unknown`) or TRANSIENT_FAILURE (`NotServing`). Ejection wins over it. Health is `Unknown` whenever the
//! subchannel is not READY.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Instant;

use grpc_base::{Address, Rng};

use crate::action::{LbAction, TimerEvent};
use crate::backoff::{BackoffConfig, ConnectionBackoff};
use crate::health::Health;
use crate::picker::PickerSpec;
use crate::state::{ConnectivityState, SubchannelId};
use crate::transport::TransportKey;
use crate::work::visit;

/// One subchannel. Policies read its fields; only [`Subchannels`] writes them, keeping its timers and counts
/// in step.
#[derive(Debug)]
pub struct Subchannel {
    pub(crate) id: SubchannelId,
    pub(crate) addr: Address,
    pub(crate) transport: Option<TransportKey>,
    pub(crate) state: ConnectivityState,
    backoff: ConnectionBackoff,
    next_start: Option<Instant>,
    connect_deadline: Option<Instant>,
    idle_at: Option<Instant>,
    /// Failed since it was last READY (round_robin reports such a subchannel as TRANSIENT_FAILURE).
    pub(crate) failed_since_ready: bool,
    /// The health of its current connection (`Unknown` unless READY).
    pub(crate) health: Health,
    /// Its latest connection error (a failed or timed-out attempt), with the registry's error sequence
    /// number, bounded to [`MAX_ERROR_LEN`] bytes.
    last_error: Option<(u64, String)>,
}

/// The longest connection error kept per subchannel, in bytes (longer ones are cut at a character
/// boundary and end with `…`).
pub(crate) const MAX_ERROR_LEN: usize = 1024;

/// `error` cut to [`MAX_ERROR_LEN`] bytes.
fn bounded_error(mut error: String) -> String {
    if error.len() > MAX_ERROR_LEN {
        let mut end = MAX_ERROR_LEN - '…'.len_utf8();
        while !error.is_char_boundary(end) {
            end -= 1;
        }
        error.truncate(end);
        error.push('…');
    }
    error
}

/// The latest connection error among a set of subchannels (one child policy's), kept as their changes
/// are seen: O(1) per change.
#[derive(Debug, Default)]
pub(crate) struct LatestError(Option<(u64, String)>);

impl LatestError {
    /// Keeps subchannel `id`'s error if it is later than the one kept.
    pub(crate) fn offer(&mut self, subs: &Subchannels, id: SubchannelId) {
        let Some((seq, error)) = subs.get(id).and_then(|s| s.last_error.as_ref()) else {
            return;
        };
        if self.0.as_ref().is_none_or(|(kept, _)| kept < seq) {
            self.0 = Some((*seq, error.clone()));
        }
    }

    /// The error kept, if any.
    pub(crate) fn message(&self) -> Option<&str> {
        self.0.as_ref().map(|(_, e)| e.as_str())
    }
}

/// The subchannels of one policy, and the actions they produce (the registry every policy, built-in or
/// not, keeps its subchannels in).
///
/// Every lookup and every event costs O(log n) in the number of subchannels: they are kept by id (in the
/// order they were created), with an index by address, the pending timers in deadline order, and how many
/// are in each state. A policy that balances over many subchannels asks which ones changed since it last
/// looked ([`Subchannels::take_changed`]) rather than looking at them all.
pub struct Subchannels {
    /// By id: in the order they were created.
    by_id: BTreeMap<SubchannelId, Subchannel>,
    /// Each address's subchannel with the channel's own transport.
    by_addr: HashMap<Address, SubchannelId>,
    /// Each address's subchannel with a given transport, by transport (few: one per security setting in
    /// use).
    by_transport: HashMap<TransportKey, HashMap<Address, SubchannelId>>,
    /// The pending timers: the end of a TRANSIENT_FAILURE subchannel's backoff, a CONNECTING one's
    /// attempt deadline.
    timers: BTreeSet<(Instant, SubchannelId)>,
    /// How many subchannels are in each (real) state.
    counts: StateCounts,
    /// Subchannels whose state as a policy sees it may have changed since [`Subchannels::take_changed`]
    /// (kept only once a policy asked for it with [`Subchannels::track_changes`]).
    changed: BTreeSet<SubchannelId>,
    track_changes: bool,
    next_id: u64,
    config: BackoffConfig,
    pub(crate) rng: Box<dyn Rng>,
    pub(crate) out: VecDeque<LbAction>,
    pub(crate) last_error: Option<String>,
    /// The sequence number of the last subchannel error (orders the errors of different subchannels).
    error_seq: u64,
    /// Addresses outlier detection ejected.
    ejected: HashSet<Address>,
    /// Whether the health overlay applies (only a policy that health checks turns it on).
    health_checking: bool,
}

impl std::fmt::Debug for Subchannels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subchannels")
            .field("len", &self.by_id.len())
            .field("ejected", &self.ejected.len())
            .field("health_checking", &self.health_checking)
            .finish_non_exhaustive()
    }
}

/// How many of a set of subchannels are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StateCounts([usize; 5]);

impl StateCounts {
    fn slot(state: ConnectivityState) -> usize {
        match state {
            ConnectivityState::Idle => 0,
            ConnectivityState::Connecting => 1,
            ConnectivityState::Ready => 2,
            ConnectivityState::TransientFailure => 3,
            ConnectivityState::Shutdown => 4,
        }
    }

    pub(crate) fn add(&mut self, state: ConnectivityState) {
        self.0[Self::slot(state)] += 1;
    }

    pub(crate) fn remove(&mut self, state: ConnectivityState) {
        let n = &mut self.0[Self::slot(state)];
        *n = n.saturating_sub(1);
    }

    /// How many are in `state`.
    pub(crate) fn count(&self, state: ConnectivityState) -> usize {
        self.0[Self::slot(state)]
    }

    /// How many in all.
    pub(crate) fn total(&self) -> usize {
        self.0.iter().sum()
    }

    /// [`ConnectivityState::aggregate`] of the states counted.
    pub(crate) fn aggregate(&self) -> ConnectivityState {
        if self.count(ConnectivityState::Ready) > 0 {
            ConnectivityState::Ready
        } else if self.count(ConnectivityState::Connecting) > 0 {
            ConnectivityState::Connecting
        } else if self.count(ConnectivityState::Idle) > 0 {
            ConnectivityState::Idle
        } else {
            ConnectivityState::TransientFailure
        }
    }
}

impl Subchannel {
    /// Its id.
    pub fn id(&self) -> SubchannelId {
        self.id
    }

    /// Its address.
    pub fn address(&self) -> &Address {
        &self.addr
    }

    /// Its transport (`None`: the channel's own).
    pub fn transport(&self) -> Option<&TransportKey> {
        self.transport.as_ref()
    }

    /// Its real state, without the overlays ([`Subchannels::state`] has them).
    pub fn real_state(&self) -> ConnectivityState {
        self.state
    }

    /// Whether it failed since it was last READY.
    pub fn failed_since_ready(&self) -> bool {
        self.failed_since_ready
    }

    /// The health of its current connection ([`Health::Unknown`] unless READY and answered).
    pub fn health(&self) -> Health {
        self.health
    }

    /// Its latest connection error ("address: error", at most 1024 bytes), if an attempt failed.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_ref().map(|(_, e)| e.as_str())
    }

    /// When its timer fires, if it has one.
    fn timer(&self) -> Option<Instant> {
        match self.state {
            ConnectivityState::TransientFailure => self.idle_at,
            ConnectivityState::Connecting => self.connect_deadline,
            _ => None,
        }
    }
}

impl Subchannels {
    /// An empty registry whose subchannels back off with `config`, drawing jitter from `rng`.
    pub fn new(config: BackoffConfig, rng: Box<dyn Rng>) -> Subchannels {
        Subchannels {
            by_id: BTreeMap::new(),
            by_addr: HashMap::new(),
            by_transport: HashMap::new(),
            timers: BTreeSet::new(),
            counts: StateCounts::default(),
            changed: BTreeSet::new(),
            track_changes: false,
            next_id: 0,
            config,
            rng,
            out: VecDeque::new(),
            last_error: None,
            error_seq: 0,
            ejected: HashSet::new(),
            health_checking: false,
        }
    }

    /// Queues a new picker for the channel to publish, with the policy's connectivity state.
    pub fn publish(&mut self, state: ConnectivityState, picker: PickerSpec) {
        self.out.push_back(LbAction::UpdatePicker { state, picker });
    }

    /// Asks the channel to re-resolve (rate-limited by the resolver).
    pub fn resolve_now(&mut self) {
        self.out.push_back(LbAction::ResolveNow);
    }

    /// The policy's randomness.
    pub fn rng(&mut self) -> &mut dyn Rng {
        self.rng.as_mut()
    }

    /// The last error a subchannel saw (a failed attempt, an ejection, a health check), for a failing
    /// picker's message: one for the whole policy ([`Subchannel::last_error`] is each subchannel's own).
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// How many subchannels there are.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The next action for the channel, until `None`.
    pub fn poll_action(&mut self) -> Option<LbAction> {
        self.out.pop_front()
    }

    /// Keeps, from now on, which subchannels changed ([`Subchannels::take_changed`]).
    pub fn track_changes(&mut self) {
        self.track_changes = true;
    }

    /// The subchannels whose state as a policy sees it (real state, ejection, health) may have changed
    /// since the last call, in id order; removed ones included.
    pub fn take_changed(&mut self) -> BTreeSet<SubchannelId> {
        std::mem::take(&mut self.changed)
    }

    /// Records `ids` as changed again (a policy that has not shown their change everywhere yet).
    pub fn mark_changed(&mut self, ids: BTreeSet<SubchannelId>) {
        if self.track_changes {
            if self.changed.is_empty() {
                self.changed = ids;
            } else {
                self.changed.extend(ids);
            }
        }
    }

    fn mark(&mut self, id: SubchannelId) {
        if self.track_changes {
            self.changed.insert(id);
        }
    }

    /// Subchannel `id`, unless removed.
    pub fn get(&self, id: SubchannelId) -> Option<&Subchannel> {
        visit(1);
        self.by_id.get(&id)
    }

    /// Applies `f` to subchannel `id`, keeping the timers and counts in step with its new state.
    fn with<R>(&mut self, id: SubchannelId, f: impl FnOnce(&mut Subchannel) -> R) -> Option<R> {
        visit(1);
        let s = self.by_id.get_mut(&id)?;
        let before = (s.state, s.timer());
        let result = f(s);
        self.changed_from(id, before);
        Some(result)
    }

    /// Subchannel `id` was in `before` (state, timer): moves its timer and count to where it is now, and
    /// marks it changed.
    fn changed_from(&mut self, id: SubchannelId, before: (ConnectivityState, Option<Instant>)) {
        let Some(s) = self.by_id.get(&id) else {
            return;
        };
        let now = (s.state, s.timer());
        if before != now {
            if let Some(at) = before.1 {
                self.timers.remove(&(at, id));
            }
            if let Some(at) = now.1 {
                self.timers.insert((at, id));
            }
            self.counts.remove(before.0);
            self.counts.add(now.0);
        }
        self.mark(id);
    }

    /// `addr`'s subchannel with the channel's own transport, if it has one.
    pub fn find(&self, addr: &Address) -> Option<SubchannelId> {
        visit(1);
        self.by_addr.get(addr).copied()
    }

    /// `addr`'s subchannel with `transport`, if it has one.
    pub fn find_with(
        &self,
        addr: &Address,
        transport: Option<&TransportKey>,
    ) -> Option<SubchannelId> {
        match transport {
            None => self.find(addr),
            Some(t) => {
                visit(1);
                self.by_transport.get(t)?.get(addr).copied()
            }
        }
    }

    /// `addr`'s subchannel with the channel's own transport, created (IDLE) if it has none.
    pub fn find_or_add(&mut self, addr: &Address) -> SubchannelId {
        match self.find(addr) {
            Some(id) => id,
            None => self.add(addr.clone(), None),
        }
    }

    /// `addr`'s subchannel with `transport`, created (IDLE) if it has none.
    pub fn find_or_add_with(
        &mut self,
        addr: &Address,
        transport: Option<&TransportKey>,
    ) -> SubchannelId {
        match self.find_with(addr, transport) {
            Some(id) => id,
            None => self.add(addr.clone(), transport.cloned()),
        }
    }

    /// Every subchannel of `addr`, whatever its transport.
    fn all_of(&self, addr: &Address) -> Vec<SubchannelId> {
        let mut ids: Vec<SubchannelId> = self.find(addr).into_iter().collect();
        for m in self.by_transport.values() {
            visit(1);
            ids.extend(m.get(addr).copied());
        }
        ids
    }

    /// How many subchannels are in (real) state `state`.
    pub fn count(&self, state: ConnectivityState) -> usize {
        self.counts.count(state)
    }

    /// The state the policy sees: TRANSIENT_FAILURE while the subchannel's address is ejected; with health
    /// checking on, a READY subchannel not `Serving` looks CONNECTING (`Unknown`) or TRANSIENT_FAILURE
    /// (`NotServing`); its real state otherwise (SHUTDOWN once removed).
    pub fn state(&self, id: SubchannelId) -> ConnectivityState {
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

    /// Whether the health overlay applies.
    pub fn health_checking(&self) -> bool {
        self.health_checking
    }

    /// Turns the health overlay on or off; returns whether that changed anything (then every subchannel
    /// counts as changed).
    pub fn set_health_checking(&mut self, enabled: bool) -> bool {
        if self.health_checking == enabled {
            return false;
        }
        self.health_checking = enabled;
        if self.track_changes {
            visit(self.by_id.len());
            self.changed.extend(self.by_id.keys().copied());
        }
        true
    }

    /// The health of `addr`'s subchannel's connection (`None` without a subchannel for it; when the
    /// address has several, one per transport, the first READY one's, else the first one's, the channel's
    /// own transport first).
    pub fn health(&self, addr: &Address) -> Option<Health> {
        let subs: Vec<&Subchannel> = self
            .all_of(addr)
            .into_iter()
            .filter_map(|id| self.get(id))
            .collect();
        subs.iter()
            .find(|s| s.state == ConnectivityState::Ready)
            .or(subs.first())
            .map(|s| s.health)
    }

    /// Records the health of `addr`'s subchannel's connection. Ignored (returns false) without a subchannel
    /// for `addr` or if it is not READY (a late answer from a connection already gone); returns whether the
    /// health changed. A `NotServing` answer becomes the error the failing picker reports.
    pub fn set_health(&mut self, addr: &Address, health: Health) -> bool {
        let mut changed = false;
        for id in self.all_of(addr) {
            match self.get(id) {
                Some(s) if s.state == ConnectivityState::Ready && s.health != health => {}
                _ => continue,
            }
            self.with(id, |s| s.health = health);
            changed = true;
        }
        if changed && health == Health::NotServing {
            self.last_error = Some(format!("{addr}: health check: not serving"));
        }
        changed
    }

    /// The subchannel's real state, ejected or not (SHUTDOWN once removed).
    pub fn real_state(&self, id: SubchannelId) -> ConnectivityState {
        self.get(id)
            .map_or(ConnectivityState::Shutdown, |s| s.state)
    }

    /// Whether subchannel `id`'s address is ejected.
    pub fn is_ejected(&self, id: SubchannelId) -> bool {
        self.get(id).is_some_and(|s| self.ejected.contains(&s.addr))
    }

    /// Whether `addr` is ejected.
    pub fn is_address_ejected(&self, addr: &Address) -> bool {
        self.ejected.contains(addr)
    }

    /// Ejects `addr` (or lifts its ejection). Returns whether that changed anything. An ejection becomes
    /// the error the failing picker reports.
    pub fn set_ejected(&mut self, addr: &Address, ejected: bool) -> bool {
        let changed = if ejected {
            let changed = self.ejected.insert(addr.clone());
            if changed {
                self.last_error = Some(format!("{addr}: ejected by outlier detection"));
            }
            changed
        } else {
            self.ejected.remove(addr)
        };
        if changed {
            for id in self.all_of(addr) {
                self.mark(id);
            }
        }
        changed
    }

    /// A new subchannel for `addr` with `transport`, which must have none yet
    /// ([`Subchannels::find_or_add_with`] otherwise).
    fn add(&mut self, addr: Address, transport: Option<TransportKey>) -> SubchannelId {
        let id = SubchannelId(self.next_id);
        self.next_id += 1;
        match &transport {
            None => self.by_addr.insert(addr.clone(), id),
            Some(t) => self
                .by_transport
                .entry(t.clone())
                .or_default()
                .insert(addr.clone(), id),
        };
        self.by_id.insert(
            id,
            Subchannel {
                id,
                addr,
                transport,
                state: ConnectivityState::Idle,
                backoff: ConnectionBackoff::new(self.config),
                next_start: None,
                connect_deadline: None,
                idle_at: None,
                failed_since_ready: false,
                health: Health::Unknown,
                last_error: None,
            },
        );
        self.counts.add(ConnectivityState::Idle);
        self.mark(id);
        id
    }

    /// Makes the subchannels match `addresses` (in order, without duplicates): keeps those whose address
    /// stays, adds the new ones (IDLE), removes the rest. Returns the ids in order.
    pub fn sync(&mut self, addresses: &[Address]) -> Vec<SubchannelId> {
        let mut order = Vec::with_capacity(addresses.len());
        let mut kept = HashSet::with_capacity(addresses.len());
        for addr in addresses {
            let id = self.find_or_add(addr);
            if kept.insert(id) {
                order.push(id);
            }
        }
        if kept.len() < self.by_id.len() {
            let stale: Vec<SubchannelId> = self.ids().filter(|id| !kept.contains(id)).collect();
            for id in stale {
                self.remove(id);
            }
        }
        order
    }

    /// Removes a subchannel, closing its connection or attempt.
    pub fn remove(&mut self, id: SubchannelId) {
        visit(1);
        let Some(s) = self.by_id.remove(&id) else {
            return;
        };
        match &s.transport {
            None => {
                self.by_addr.remove(&s.addr);
            }
            Some(t) => {
                if let Some(m) = self.by_transport.get_mut(t) {
                    m.remove(&s.addr);
                    if m.is_empty() {
                        self.by_transport.remove(t);
                    }
                }
            }
        }
        if let Some(at) = s.timer() {
            self.timers.remove(&(at, id));
        }
        self.counts.remove(s.state);
        self.mark(id);
        if matches!(
            s.state,
            ConnectivityState::Connecting | ConnectivityState::Ready
        ) {
            self.out.push_back(LbAction::Disconnect { id });
        }
    }

    /// Closes a subchannel's connection but keeps it (IDLE), e.g. the losers of pick_first's race.
    pub fn disconnect(&mut self, id: SubchannelId) {
        let connected = self.get(id).is_some_and(|s| {
            matches!(
                s.state,
                ConnectivityState::Connecting | ConnectivityState::Ready
            )
        });
        if connected {
            self.with(id, |s| {
                s.state = ConnectivityState::Idle;
                s.connect_deadline = None;
                s.health = Health::Unknown;
            });
            self.out.push_back(LbAction::Disconnect { id });
        }
    }

    /// Starts an attempt if the subchannel is IDLE. Returns whether it did.
    pub fn connect(&mut self, id: SubchannelId, now: Instant) -> bool {
        visit(1);
        let Some(s) = self.by_id.get_mut(&id) else {
            return false;
        };
        if s.state != ConnectivityState::Idle {
            return false;
        }
        let before = (s.state, s.timer());
        let (next_start, deadline) = s.backoff.attempt(now, self.rng.as_mut());
        s.state = ConnectivityState::Connecting;
        s.next_start = Some(next_start);
        s.connect_deadline = Some(deadline);
        let addr = s.addr.clone();
        let transport = s.transport.clone();
        self.changed_from(id, before);
        self.out.push_back(LbAction::Connect {
            id,
            addr,
            transport,
            deadline,
        });
        true
    }

    /// The server's SETTINGS arrived. Returns whether the subchannel was CONNECTING.
    pub fn ready(&mut self, id: SubchannelId) -> bool {
        if self.real_state(id) != ConnectivityState::Connecting {
            return false;
        }
        self.with(id, |s| {
            s.state = ConnectivityState::Ready;
            s.connect_deadline = None;
            s.failed_since_ready = false;
            s.health = Health::Unknown;
            s.backoff.reset();
        });
        true
    }

    /// The attempt failed: TRANSIENT_FAILURE until the attempt's backoff deadline. Returns whether it was
    /// CONNECTING.
    pub fn failed(&mut self, id: SubchannelId, error: String, now: Instant) -> bool {
        if self.real_state(id) != ConnectivityState::Connecting {
            return false;
        }
        self.error_seq += 1;
        let seq = self.error_seq;
        let error = self.with(id, |s| {
            s.state = ConnectivityState::TransientFailure;
            s.connect_deadline = None;
            s.failed_since_ready = true;
            s.idle_at = Some(s.next_start.unwrap_or(now).max(now));
            let error = bounded_error(format!("{}: {error}", s.addr));
            s.last_error = Some((seq, error.clone()));
            error
        });
        if let Some(error) = error {
            self.last_error = Some(error);
        }
        true
    }

    /// The READY connection closed: IDLE. Returns whether it was READY.
    pub fn closed(&mut self, id: SubchannelId) -> bool {
        if self.real_state(id) != ConnectivityState::Ready {
            return false;
        }
        self.with(id, |s| {
            s.state = ConnectivityState::Idle;
            s.health = Health::Unknown;
        });
        true
    }

    /// When the earliest subchannel timer (a backoff's end, an attempt's deadline) fires.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|(at, _)| *at)
    }

    /// Fires the subchannel timers due at `now`, in id order.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<TimerEvent> {
        let mut due: Vec<SubchannelId> = self
            .timers
            .range(..=(now, SubchannelId(u64::MAX)))
            .map(|(_, id)| *id)
            .collect();
        due.sort_unstable();
        let mut events = Vec::with_capacity(due.len());
        for id in due {
            let backoff_over = self.with(id, |s| match s.state {
                ConnectivityState::TransientFailure if s.idle_at.is_some_and(|t| t <= now) => {
                    s.state = ConnectivityState::Idle;
                    s.idle_at = None;
                    Some(TimerEvent::BackoffOver(id))
                }
                ConnectivityState::Connecting if s.connect_deadline.is_some_and(|t| t <= now) => {
                    Some(TimerEvent::ConnectTimedOut(id))
                }
                _ => None,
            });
            events.extend(backoff_over.flatten());
        }
        for e in &events {
            if let TimerEvent::ConnectTimedOut(id) = e {
                self.out.push_back(LbAction::Disconnect { id: *id });
                self.failed(*id, "connection attempt timed out".to_owned(), now);
            }
        }
        events
    }

    /// Every subchannel's id, in id order: O(n), for the events that concern them all.
    pub fn ids(&self) -> impl Iterator<Item = SubchannelId> + '_ {
        self.by_id.keys().inspect(|_| visit(1)).copied()
    }

    /// Every subchannel, in id order: O(n), for the events that concern them all.
    pub fn iter(&self) -> impl Iterator<Item = &Subchannel> {
        self.by_id.values().inspect(|_| visit(1))
    }
}

#[cfg(test)]
mod tests {
    use super::{bounded_error, MAX_ERROR_LEN};

    #[test]
    fn an_error_at_the_bound_is_kept_whole_and_a_longer_one_is_cut_at_a_char_boundary() {
        let at_bound = "e".repeat(MAX_ERROR_LEN);
        assert_eq!(bounded_error(at_bound.clone()), at_bound);
        let over = "é".repeat(MAX_ERROR_LEN);
        let cut = bounded_error(over);
        assert!(cut.len() <= MAX_ERROR_LEN, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert!(cut.starts_with("éé"));
    }
}
