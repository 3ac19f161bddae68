//! pick_first (gRFC A62, A61): connect to the addresses in order with Happy Eyeballs (RFC 8305: the next
//! attempt starts after 250 ms, or at once when the current one fails, without cancelling earlier ones), use
//! the first that becomes READY for every call, and drop the others.
//!
//! * The address list is optionally shuffled (`shuffleAddressList`), then its families are interleaved
//!   (IPv6, IPv4, IPv6, ... starting with the first address's family; Unix-domain sockets are a third
//!   family, see [`interleave_families`]).
//! * When every address has failed once, the policy reports TRANSIENT_FAILURE and stays there ("sticky") while
//!   it keeps reconnecting every subchannel whose backoff ends, asking for re-resolution each time as many
//!   failures as there are addresses have piled up.
//! * When the chosen connection breaks, the policy goes IDLE (and asks for re-resolution); the next call
//!   wakes it with `exit_idle`.
//! * A new address list keeps the chosen connection if its address is still in the list; otherwise a new
//!   Happy Eyeballs pass starts. Subchannels of addresses that stay are kept.
//!
//! pick_first ignores the pick's avoid hint: it has one backend to offer.
//!
//! Outlier detection: an ejected subchannel looks TRANSIENT_FAILURE. Ejecting the selected one is like
//! losing its connection (the policy goes IDLE and asks for re-resolution; the next call starts a pass in
//! which the ejected address counts as failed), except that the connection stays open; ejecting one the
//! pass is waiting for counts as its failure. What an ejected subchannel does meanwhile is hidden from the
//! pass. Returned to service while nothing is selected and the policy is not IDLE, a READY subchannel is
//! selected at once.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use grpc_base::{Address, Family};

use crate::action::{LbAction, TimerEvent};
use crate::picker::PickerSpec;
use crate::state::{ConnectivityState, SubchannelId};
use crate::subchannel::Subchannels;
use crate::work::visit;

/// The Happy Eyeballs connection attempt delay: 250 ms by default, clamped to [100 ms, 2 s].
pub const DEFAULT_ATTEMPT_DELAY: Duration = Duration::from_millis(250);

pub(crate) struct PickFirst {
    pub(crate) subs: Subchannels,
    shuffle: bool,
    attempt_delay: Duration,
    order: Vec<SubchannelId>,
    state: ConnectivityState,
    selected: Option<SubchannelId>,
    /// Happy Eyeballs: the index of the next address to try, and when to try it.
    pass_next: Option<usize>,
    pass_timer: Option<Instant>,
    /// Addresses that failed during this pass (all in `order`).
    failed_in_pass: HashSet<SubchannelId>,
    /// After the first pass failed: reconnect every subchannel whose backoff ends.
    steady: bool,
    failures: usize,
    had_update: bool,
}

impl PickFirst {
    pub(crate) fn new(subs: Subchannels, shuffle: bool, attempt_delay: Duration) -> PickFirst {
        PickFirst {
            subs,
            shuffle,
            attempt_delay: attempt_delay.clamp(Duration::from_millis(100), Duration::from_secs(2)),
            order: Vec::new(),
            state: ConnectivityState::Idle,
            selected: None,
            pass_next: None,
            pass_timer: None,
            failed_in_pass: HashSet::new(),
            steady: false,
            failures: 0,
            had_update: false,
        }
    }

    pub(crate) fn state(&self) -> ConnectivityState {
        self.state
    }

    fn publish(&mut self, state: ConnectivityState) {
        self.state = state;
        let picker = match state {
            ConnectivityState::Idle => PickerSpec::Idle,
            ConnectivityState::Connecting => PickerSpec::Queue,
            ConnectivityState::Ready => match self.selected.and_then(|id| self.subs.get(id)) {
                Some(s) => PickerSpec::Ready(vec![(s.id, s.addr.clone())]),
                None => PickerSpec::Queue,
            },
            ConnectivityState::TransientFailure | ConnectivityState::Shutdown => {
                PickerSpec::Fail(format!(
                    "failed to connect to all addresses; last error: {}",
                    self.subs.last_error.as_deref().unwrap_or("none")
                ))
            }
        };
        self.subs
            .out
            .push_back(LbAction::UpdatePicker { state, picker });
    }

    /// Whether later address lists are shuffled (A62 `shuffleAddressList`).
    pub(crate) fn set_shuffle(&mut self, shuffle: bool) {
        self.shuffle = shuffle;
    }

    pub(crate) fn update(&mut self, addresses: Vec<Address>, now: Instant) {
        let mut endpoints = addresses;
        if self.shuffle {
            for i in (1..endpoints.len()).rev() {
                let j = (self.subs.rng.next_u64() % (i as u64 + 1)) as usize;
                endpoints.swap(i, j);
            }
        }
        let ordered = interleave_families(endpoints);
        self.order = self.subs.sync(&ordered);
        // Only addresses still in the list count as failed in the pass.
        let subs = &self.subs;
        self.failed_in_pass.retain(|id| subs.get(*id).is_some());
        let first = !self.had_update;
        self.had_update = true;
        if let Some(sel) = self.selected {
            if self.order.contains(&sel) && self.subs.state(sel) == ConnectivityState::Ready {
                self.publish(ConnectivityState::Ready);
                return;
            }
            self.selected = None;
        }
        if first || self.state != ConnectivityState::Idle {
            self.start_pass(now);
        }
    }

    pub(crate) fn exit_idle(&mut self, now: Instant) {
        if self.state == ConnectivityState::Idle && self.had_update {
            self.start_pass(now);
        }
    }

    fn start_pass(&mut self, now: Instant) {
        self.pass_next = Some(0);
        self.pass_timer = None;
        self.failed_in_pass.clear();
        self.steady = false;
        self.failures = 0;
        if self.order.is_empty() {
            self.subs.last_error = Some("the resolver returned no addresses".to_owned());
            self.publish(ConnectivityState::TransientFailure);
            return;
        }
        if self.state != ConnectivityState::TransientFailure {
            // Sticky TRANSIENT_FAILURE: a pass started in TF reports nothing until something is READY.
            self.publish(ConnectivityState::Connecting);
        }
        self.advance_pass(now);
    }

    /// Starts the next attempt of the Happy Eyeballs pass.
    fn advance_pass(&mut self, now: Instant) {
        let Some(mut i) = self.pass_next else { return };
        self.pass_timer = None;
        while i < self.order.len() {
            visit(1);
            let id = self.order[i];
            i += 1;
            match self.subs.state(id) {
                ConnectivityState::Idle => {
                    self.subs.connect(id, now);
                }
                ConnectivityState::Connecting => {}
                ConnectivityState::Ready => {
                    self.select(id);
                    return;
                }
                // Backing off: counts as already tried; go on at once.
                ConnectivityState::TransientFailure | ConnectivityState::Shutdown => {
                    self.failed_in_pass.insert(id);
                    continue;
                }
            }
            self.pass_next = Some(i);
            if i < self.order.len() {
                self.pass_timer = Some(now + self.attempt_delay);
            }
            return;
        }
        self.pass_next = Some(i);
        self.check_pass_failed(now);
    }

    fn check_pass_failed(&mut self, now: Instant) {
        if self.selected.is_some() || self.steady {
            return;
        }
        // Every address of the list failed (`failed_in_pass` holds addresses of the list only).
        let all_failed = self.failed_in_pass.len() == self.order.len();
        if all_failed && self.pass_next.is_some_and(|n| n >= self.order.len()) {
            // The first pass is over: report TRANSIENT_FAILURE (sticky), ask for new addresses, and keep trying
            // every address as its backoff ends.
            self.pass_next = None;
            self.pass_timer = None;
            self.steady = true;
            self.failures = 0;
            self.subs.out.push_back(LbAction::ResolveNow);
            self.publish(ConnectivityState::TransientFailure);
            // A subchannel whose backoff ended during the pass is IDLE and no timer will wake it: connect it
            // now (grpc-go `endFirstPassIfPossibleLocked`), or it would stay IDLE while the others retry.
            for id in self.order.clone() {
                visit(1);
                if self.subs.state(id) == ConnectivityState::Idle {
                    self.subs.connect(id, now);
                }
            }
        }
    }

    fn select(&mut self, id: SubchannelId) {
        self.selected = Some(id);
        self.pass_next = None;
        self.pass_timer = None;
        self.steady = false;
        for other in self.order.clone() {
            visit(1);
            if other != id {
                self.subs.disconnect(other);
            }
        }
        self.publish(ConnectivityState::Ready);
    }

    pub(crate) fn subchannel_ready(&mut self, id: SubchannelId, _now: Instant) {
        if !self.subs.ready(id) || self.subs.is_ejected(id) {
            return;
        }
        match self.selected {
            None => self.select(id),
            // A race loser that connected anyway.
            Some(sel) if sel != id => self.subs.disconnect(id),
            Some(_) => {}
        }
    }

    pub(crate) fn subchannel_failed(&mut self, id: SubchannelId, error: String, now: Instant) {
        if !self.subs.failed(id, error, now) || self.subs.is_ejected(id) {
            return;
        }
        self.on_failure(id, now);
    }

    fn on_failure(&mut self, id: SubchannelId, now: Instant) {
        if self.steady {
            self.failures += 1;
            if self.failures >= self.order.len() {
                self.failures = 0;
                self.subs.out.push_back(LbAction::ResolveNow);
            }
            // Refresh the error in the TRANSIENT_FAILURE picker.
            self.publish(ConnectivityState::TransientFailure);
            return;
        }
        if self.pass_next.is_some() {
            self.failed_in_pass.insert(id);
            // RFC 8305: a failure starts the next attempt at once.
            let last_started = self
                .pass_next
                .and_then(|n| n.checked_sub(1))
                .and_then(|i| self.order.get(i));
            if last_started == Some(&id) || self.pass_timer.is_none() {
                self.advance_pass(now);
            }
            self.check_pass_failed(now);
        }
    }

    pub(crate) fn subchannel_closed(&mut self, id: SubchannelId, _now: Instant) {
        if !self.subs.closed(id) {
            return;
        }
        if self.selected == Some(id) {
            self.selected = None;
            self.subs.out.push_back(LbAction::ResolveNow);
            self.publish(ConnectivityState::Idle);
        }
    }

    /// Outlier detection ejected `addr` (or returned it): see the module docs.
    pub(crate) fn ejection_changed(&mut self, addr: &Address, now: Instant) {
        let Some(id) = self.subs.find(addr) else {
            return;
        };
        if self.subs.is_ejected(id) {
            if self.selected == Some(id) {
                self.selected = None;
                self.subs.out.push_back(LbAction::ResolveNow);
                self.publish(ConnectivityState::Idle);
            } else if self.steady
                || (self.pass_next.is_some() && !self.failed_in_pass.contains(&id))
            {
                self.on_failure(id, now);
            }
        } else if self.selected.is_none()
            && self.state != ConnectivityState::Idle
            && self.subs.real_state(id) == ConnectivityState::Ready
        {
            self.select(id);
        }
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        [self.pass_timer, self.subs.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        if self.pass_timer.is_some_and(|t| t <= now) {
            self.advance_pass(now);
        }
        for event in self.subs.handle_timeout(now) {
            match event {
                TimerEvent::BackoffOver(id) => {
                    if self.steady {
                        self.subs.connect(id, now);
                    }
                }
                TimerEvent::ConnectTimedOut(id) => self.on_failure(id, now),
            }
        }
    }
}

/// RFC 8305 §4: alternate address families, starting with the family of the first address.
///
/// The families take turns in the order they first appear in the list, each giving its next address; a
/// family that runs out drops out, and each family keeps its own order. With IPv4 and IPv6 this is RFC
/// 8305's interleaving (IPv6, IPv4, IPv6, ... when the list starts with IPv6). Unix-domain sockets are a
/// third family, interleaved like the others, as grpc-go's pick_first does with addresses that are neither
/// IPv4 nor IPv6: a list starting with a Unix socket tries it first, and one where it comes later gives it
/// its turn after the IP families seen before it. An IPv4-mapped IPv6 address counts as IPv6 (it is
/// connected over an IPv6 socket).
pub fn interleave_families(addresses: Vec<Address>) -> Vec<Address> {
    let total = addresses.len();
    // At most three families, in the order they first appear.
    let mut families: Vec<(Family, VecDeque<Address>)> = Vec::with_capacity(3);
    for address in addresses {
        let family = address.family();
        match families.iter_mut().find(|(f, _)| *f == family) {
            Some((_, queue)) => queue.push_back(address),
            None => families.push((family, VecDeque::from([address]))),
        }
    }
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        for (_, queue) in &mut families {
            out.extend(queue.pop_front());
        }
    }
    out
}
