//! Per-address figures for `Channel::stats()` ([`AddressStats`]): the attempts each address carried
//! (started, succeeded, failed, counted as channelz counts a subchannel's calls: one per attempt that got a
//! connection to the address from a pick, whatever the call's fate) and the connectivity and health state
//! of its subchannel. The counts are the atomics of the address's `CallResults` (`outlier.rs`), which
//! attempts reach through their pick, so a call costs two relaxed atomic adds and takes no lock; the event
//! loop writes the states here as its subchannels change (O(log n) per event).
//!
//! An address may have several subchannels (one per transport, A29; a retired policy's connections while
//! a new policy starts): its row keeps each one's state and shows the best (READY over CONNECTING over
//! IDLE over TRANSIENT_FAILURE), so an address carrying calls over one READY connection reads READY while
//! another transport's subchannel to it fails. A row holds one entry per live subchannel of the address
//! (a disconnected or removed one leaves), so its size is bounded by the transports in use.
//!
//! Bounded by the address list: an address has a row while it is in the list the resolver gave (a resolver
//! update is bounded in size by the channel), and loses it, its counts with it, when it leaves. Not here:
//! the outlier detector's counts and ejections (`outlier.rs`) and the channel-wide call figures
//! (`call/telemetry.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use grpc_lb::{Address, ConnectivityState, Health, SubchannelId};
use parking_lot::Mutex;

use crate::control::outlier::CallResults;

/// What [`Channel::stats`](crate::Channel::stats) shows of one address (`ip:port`, or `unix:` and a Unix
/// socket's path, e.g. `unix:/run/api.sock`: the key form of every per-address figure of
/// [`ChannelStats`](crate::ChannelStats) and of the tracing events' `address` field) in the channel's
/// current address list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AddressStats {
    /// Attempts that got a connection to this address from a pick (channelz's `calls_started` of a
    /// subchannel): retries, hedges and transparent retries each count once, on the address they went to.
    pub calls_started: u64,
    /// Of those, the attempts that ended OK.
    pub calls_succeeded: u64,
    /// Of those, the attempts that ended with any other status, or were cancelled (a hedge that lost, the
    /// application's cancel, the deadline). Attempts in flight are the rest.
    pub calls_failed: u64,
    /// The state of the address's subchannel: IDLE before the policy connects to it (or after its
    /// connection closed), CONNECTING, READY, or TRANSIENT_FAILURE after a failed connection attempt. The
    /// connection's own state: an address outlier detection ejected stays READY here (see
    /// [`ChannelStats::ejected_addresses`](crate::ChannelStats::ejected_addresses)). With several
    /// subchannels to the address (one per transport with xDS security), the best of their states: READY
    /// over CONNECTING over IDLE over TRANSIENT_FAILURE.
    pub state: ConnectivityState,
    /// What its health check last said (gRFC A17), while the policy health checks (round_robin with a
    /// `healthCheckConfig`); `None` otherwise. [`Health::Unknown`] until the connection is READY and
    /// answered.
    pub health: Option<Health>,
}

impl AddressStats {
    /// An address's figures.
    pub fn new(
        calls: (u64, u64, u64),
        state: ConnectivityState,
        health: Option<Health>,
    ) -> AddressStats {
        let (calls_started, calls_succeeded, calls_failed) = calls;
        AddressStats {
            calls_started,
            calls_succeeded,
            calls_failed,
            state,
            health,
        }
    }
}

/// Whose state a row entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// A subchannel of the current policy.
    Subchannel(SubchannelId),
    /// The connections a retired policy left serving while the new one starts.
    Retired,
}

/// One address's row.
struct Row {
    calls: Arc<CallResults>,
    /// Each live subchannel's state (few: one per transport).
    states: Vec<(Owner, ConnectivityState)>,
    /// The best of `states` (IDLE without any).
    state: ConnectivityState,
    health: Health,
}

/// How good a state is for a row: READY over CONNECTING over IDLE over TRANSIENT_FAILURE.
fn rank(state: ConnectivityState) -> u8 {
    match state {
        ConnectivityState::Ready => 4,
        ConnectivityState::Connecting => 3,
        ConnectivityState::Idle => 2,
        ConnectivityState::TransientFailure => 1,
        ConnectivityState::Shutdown => 0,
    }
}

impl Row {
    /// Shows the best state of its subchannels (its health starts over unless READY stays READY).
    fn show(&mut self) {
        let best = self
            .states
            .iter()
            .map(|(_, s)| *s)
            .max_by_key(|s| rank(*s))
            .unwrap_or(ConnectivityState::Idle);
        if best != self.state {
            self.health = Health::Unknown;
        }
        self.state = best;
    }
}

/// The event loop's per-address rows, read by `Channel::stats()`.
#[derive(Default)]
pub(crate) struct AddressTable {
    rows: Mutex<BTreeMap<Address, Row>>,
    /// Whether the policy health checks (health is shown only then).
    health_checking: AtomicBool,
}

impl AddressTable {
    /// The address list is now `results`' keys: rows for new addresses (IDLE), none for those gone.
    pub(crate) fn sync(&self, results: &HashMap<Address, Arc<CallResults>>) {
        let mut rows = self.rows.lock();
        rows.retain(|address, _| results.contains_key(address));
        for (address, calls) in results {
            rows.entry(address.clone()).or_insert_with(|| Row {
                calls: calls.clone(),
                states: Vec::new(),
                state: ConnectivityState::Idle,
                health: Health::Unknown,
            });
        }
    }

    /// `address`'s subchannel `id` is now in `state`; the row shows the best state of the address's
    /// subchannels (its health starts over unless READY stays READY).
    pub(crate) fn set_state(&self, address: &Address, id: SubchannelId, state: ConnectivityState) {
        if let Some(row) = self.rows.lock().get_mut(address) {
            let owner = Owner::Subchannel(id);
            match row.states.iter_mut().find(|(o, _)| *o == owner) {
                Some(entry) => entry.1 = state,
                None => row.states.push((owner, state)),
            }
            row.show();
        }
    }

    /// `address`'s subchannel `id` has no connection any more (disconnected or removed): it no longer
    /// counts in the row (IDLE without any other).
    pub(crate) fn disconnected(&self, address: &Address, id: SubchannelId) {
        if let Some(row) = self.rows.lock().get_mut(address) {
            row.states.retain(|(o, _)| *o != Owner::Subchannel(id));
            row.show();
        }
    }

    /// The policy was retired: `address`'s subchannels are gone, but if `kept`, its connections serve on
    /// (as one entry with their best state) until [`AddressTable::retired_gone`].
    pub(crate) fn retire(&self, address: &Address, kept: bool) {
        if let Some(row) = self.rows.lock().get_mut(address) {
            row.show();
            let state = row.state;
            row.states.clear();
            if kept {
                row.states.push((Owner::Retired, state));
            }
            row.show();
        }
    }

    /// The retired policy's connections to `address` are let go.
    pub(crate) fn retired_gone(&self, address: &Address) {
        if let Some(row) = self.rows.lock().get_mut(address) {
            row.states.retain(|(o, _)| *o != Owner::Retired);
            row.show();
        }
    }

    /// `address`'s health check said `health`.
    pub(crate) fn set_health(&self, address: &Address, health: Health) {
        if let Some(row) = self.rows.lock().get_mut(address) {
            row.health = health;
        }
    }

    /// Whether the policy health checks now.
    pub(crate) fn set_health_checking(&self, on: bool) {
        self.health_checking.store(on, Ordering::Relaxed);
    }

    /// Every subchannel is gone (IDLE, shutdown): each address shows IDLE; the counts stay.
    pub(crate) fn all_idle(&self) {
        for row in self.rows.lock().values_mut() {
            row.states.clear();
            row.state = ConnectivityState::Idle;
            row.health = Health::Unknown;
        }
    }

    /// Each address's figures, keyed by its text.
    pub(crate) fn snapshot(&self) -> HashMap<String, AddressStats> {
        let checking = self.health_checking.load(Ordering::Relaxed);
        self.rows
            .lock()
            .iter()
            .map(|(address, row)| {
                let health = checking.then_some(row.health);
                (
                    address.to_string(),
                    AddressStats::new(row.calls.attempts(), row.state, health),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(n: u8) -> Address {
        Address::Tcp(std::net::SocketAddr::from(([10, 0, 0, n], 443)))
    }

    #[test]
    fn rows_follow_the_address_list_and_keep_states() {
        let table = AddressTable::default();
        let mut results: HashMap<Address, Arc<CallResults>> =
            (1..=3).map(|n| (addr(n), Arc::default())).collect();
        table.sync(&results);
        table.set_state(&addr(1), SubchannelId(0), ConnectivityState::Ready);
        table.set_health(&addr(1), Health::Serving);
        table.set_state(&addr(9), SubchannelId(1), ConnectivityState::Ready);
        let stats = table.snapshot();
        assert_eq!(stats.len(), 3, "no row for an address outside the list");
        assert_eq!(stats["10.0.0.1:443"].state, ConnectivityState::Ready);
        assert_eq!(stats["10.0.0.1:443"].health, None, "not health checking");
        table.set_health_checking(true);
        assert_eq!(
            table.snapshot()["10.0.0.1:443"].health,
            Some(Health::Serving)
        );
        assert_eq!(
            table.snapshot()["10.0.0.2:443"].state,
            ConnectivityState::Idle
        );
        // The list shrinks: rows go with it, so the table never holds more than the list.
        results.retain(|a, _| *a == addr(1));
        table.sync(&results);
        assert_eq!(table.snapshot().len(), 1);
        table.all_idle();
        assert_eq!(
            table.snapshot()["10.0.0.1:443"].state,
            ConnectivityState::Idle
        );
    }

    #[test]
    fn an_address_with_several_subchannels_shows_the_best_state() {
        let table = AddressTable::default();
        let results: HashMap<Address, Arc<CallResults>> =
            [(addr(1), Arc::default())].into_iter().collect();
        table.sync(&results);
        let state = |t: &AddressTable| t.snapshot()["10.0.0.1:443"].state;
        let (plain, secure) = (SubchannelId(0), SubchannelId(1));
        table.set_state(&addr(1), plain, ConnectivityState::Ready);
        table.set_health(&addr(1), Health::Serving);
        for s in [
            ConnectivityState::Connecting,
            ConnectivityState::TransientFailure,
            ConnectivityState::Idle,
            ConnectivityState::Connecting,
        ] {
            table.set_state(&addr(1), secure, s);
            assert_eq!(state(&table), ConnectivityState::Ready);
        }
        table.set_health_checking(true);
        assert_eq!(
            table.snapshot()["10.0.0.1:443"].health,
            Some(Health::Serving),
            "the READY subchannel's health stays"
        );
        table.disconnected(&addr(1), plain);
        assert_eq!(state(&table), ConnectivityState::Connecting);
        table.set_state(&addr(1), secure, ConnectivityState::TransientFailure);
        table.set_state(&addr(1), plain, ConnectivityState::Idle);
        assert_eq!(state(&table), ConnectivityState::Idle);
        table.disconnected(&addr(1), plain);
        assert_eq!(state(&table), ConnectivityState::TransientFailure);
        // A retired policy's serving connection counts until it is let go.
        table.set_state(&addr(1), plain, ConnectivityState::Ready);
        table.retire(&addr(1), true);
        table.set_state(&addr(1), plain, ConnectivityState::Connecting);
        assert_eq!(state(&table), ConnectivityState::Ready);
        table.retired_gone(&addr(1));
        assert_eq!(state(&table), ConnectivityState::Connecting);
        table.disconnected(&addr(1), plain);
        assert_eq!(state(&table), ConnectivityState::Idle);
    }

    #[test]
    fn a_fleet_of_10_000_addresses_has_one_row_each_and_loses_them_with_the_list() {
        let fleet = |n: u32| -> HashMap<Address, Arc<CallResults>> {
            (0..n)
                .map(|i| {
                    let [_, _, hi, lo] = i.to_be_bytes();
                    let address = Address::Tcp(std::net::SocketAddr::from(([10, 1, hi, lo], 443)));
                    (address, Arc::default())
                })
                .collect()
        };
        let table = AddressTable::default();
        table.sync(&fleet(10_000));
        assert_eq!(table.snapshot().len(), 10_000);
        table.sync(&fleet(10_000));
        assert_eq!(
            table.snapshot().len(),
            10_000,
            "a repeated list adds no row"
        );
        table.sync(&fleet(10));
        assert_eq!(table.snapshot().len(), 10, "rows go with the list");
    }
}
