//! Per-address figures for `Channel::stats()` ([`AddressStats`]): the attempts each address carried
//! (started, succeeded, failed, counted as channelz counts a subchannel's calls: one per attempt that got a
//! connection to the address from a pick, whatever the call's fate) and the connectivity and health state
//! of its subchannel. The counts are the atomics of the address's `CallResults` (`outlier.rs`), which
//! attempts reach through their pick, so a call costs two relaxed atomic adds and takes no lock; the event
//! loop writes the states here as its subchannels change (O(log n) per event).
//!
//! Bounded by the address list: an address has a row while it is in the list the resolver gave (a resolver
//! update is bounded in size by the channel), and loses it, its counts with it, when it leaves. Not here:
//! the outlier detector's counts and ejections (`outlier.rs`) and the channel-wide call figures
//! (`call/telemetry.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use grpc_lb::{Address, ConnectivityState, Health};
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
    /// [`ChannelStats::ejected_addresses`](crate::ChannelStats::ejected_addresses)).
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

/// One address's row.
struct Row {
    calls: Arc<CallResults>,
    state: ConnectivityState,
    health: Health,
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
                state: ConnectivityState::Idle,
                health: Health::Unknown,
            });
        }
    }

    /// `address`'s subchannel is now in `state` (its health starts over unless READY stays READY).
    pub(crate) fn set_state(&self, address: &Address, state: ConnectivityState) {
        if let Some(row) = self.rows.lock().get_mut(address) {
            if row.state != state {
                row.health = Health::Unknown;
            }
            row.state = state;
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
        table.set_state(&addr(1), ConnectivityState::Ready);
        table.set_health(&addr(1), Health::Serving);
        table.set_state(&addr(9), ConnectivityState::Ready);
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
