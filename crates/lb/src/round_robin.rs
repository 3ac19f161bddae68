//! round_robin: a subchannel per address, every one kept connected (reconnecting as soon as its backoff
//! ends), picks rotating over the READY ones from a random start. The aggregate state is READY if any is
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

use std::time::Instant;

use grpc_base::Address;

use crate::picker::PickerSpec;
use crate::state::ConnectivityState;
use crate::subchannel::{LbAction, SubchannelId, Subchannels, TimerEvent};

pub(crate) struct RoundRobin {
    pub(crate) subs: Subchannels,
    order: Vec<SubchannelId>,
    published: Option<(ConnectivityState, PickerSpec)>,
}

impl RoundRobin {
    pub(crate) fn new(subs: Subchannels) -> RoundRobin {
        RoundRobin {
            subs,
            order: Vec::new(),
            published: None,
        }
    }

    pub(crate) fn state(&self) -> ConnectivityState {
        self.published
            .as_ref()
            .map_or(ConnectivityState::Idle, |(s, _)| *s)
    }

    /// The state a backend counts as: the overlays (ejection, health) of `Subchannels::state`, and
    /// TRANSIENT_FAILURE while it reconnects after a failure.
    fn effective(&self, id: SubchannelId) -> ConnectivityState {
        effective_state(&self.subs, id)
    }

    fn recompute(&mut self) {
        let state = ConnectivityState::aggregate(self.order.iter().map(|id| self.effective(*id)));
        let ready: Vec<(SubchannelId, Address)> = self
            .order
            .iter()
            .filter_map(|id| self.subs.get(*id))
            .filter(|s| self.subs.state(s.id) == ConnectivityState::Ready)
            .map(|s| (s.id, s.addr.clone()))
            .collect();
        let picker = match state {
            ConnectivityState::Ready => PickerSpec::Ready(ready),
            ConnectivityState::TransientFailure => {
                // Connected backends that are ejected or not serving are not connection failures.
                let connected = self
                    .order
                    .iter()
                    .any(|id| self.subs.real_state(*id) == ConnectivityState::Ready);
                PickerSpec::Fail(format!(
                    "{}; last error: {}",
                    if connected {
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

    pub(crate) fn update(&mut self, addresses: Vec<Address>, now: Instant) {
        self.order = self.subs.sync(&addresses);
        for id in self.order.clone() {
            self.subs.connect(id, now);
        }
        self.recompute();
    }

    pub(crate) fn exit_idle(&mut self, now: Instant) {
        for id in self.order.clone() {
            self.subs.connect(id, now);
        }
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
            self.recompute();
        }
    }

    pub(crate) fn subchannel_closed(&mut self, id: SubchannelId, now: Instant) {
        if self.subs.closed(id) {
            self.subs.out.push_back(LbAction::ResolveNow);
            self.subs.connect(id, now);
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
                    self.subs.connect(id, now);
                }
                TimerEvent::ConnectTimedOut(_) => self.subs.out.push_back(LbAction::ResolveNow),
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
