//! What the control plane's parts share: its handle ([`super::ControlPlane`], which calls pick with),
//! its event loop and the loop's health watches. The loop's inbox ([`Event`]); what calls see
//! ([`Published`]: the state and the picker, whose handles are READY connections, [`Handle`], as the loop
//! holds them, [`Conn`]); the count of calls in flight that the idle timer reads ([`ActiveCalls`]); and
//! what the loop writes for `Channel::stats()` ([`PlaneStats`]); and the seed of the channel's random
//! sources ([`clock_seed`]).
//!
//! Not here: the loop itself (`event_loop.rs`) and the handle's picks (`mod.rs`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_lb::{Address, ConnectivityState, Picker, SubchannelId};
use h2::client::SendRequest;
use tokio::time::Instant;

use crate::conn::keepalive::OpenStreams;
use crate::conn::sniff::GoAway;
use crate::control::address_stats::AddressTable;
use crate::control::health_stream::HealthStats;
use crate::control::outlier::{CallResults, EjectionStats};
use crate::control::resolver_state::RoutedTo;
use crate::wire::status::Status;

/// A READY connection as the event loop holds it: where calls open their streams, and the count of the
/// streams the channel itself keeps open on it (the health Watch), which its keepalive reads.
#[derive(Clone)]
pub(super) struct Conn {
    pub(super) send: SendRequest<Bytes>,
    pub(super) streams: OpenStreams,
}

/// What a picker hands out for a READY subchannel: its connection and its address's call results (an `Arc`
/// clone per pick, no allocation), where the attempt counts for the address's stats and outlier detection.
#[derive(Clone)]
pub(super) struct Handle {
    pub(super) conn: SendRequest<Bytes>,
    pub(super) results: Option<Arc<CallResults>>,
}

/// What calls see: the state and the picker, swapped together.
pub(crate) struct Published {
    pub(crate) state: ConnectivityState,
    pub(super) picker: Picker<Handle>,
    /// The last routing (xDS) the picker's policy has applied ([`super::resolver_state::Routing::generation`]).
    pub(super) routing_generation: u64,
    /// How many resolver results the picker's policy has applied (a lower bound), against the
    /// resolution's [`PublishCount`](crate::control::resolver_api::PublishCount).
    pub(super) resolutions: u64,
    /// The last connection failure, kept as the source of the statuses of failed picks, and the address
    /// it was to (when the loop knows it).
    pub(super) last_failure: Option<Status>,
    pub(super) last_failure_address: Option<Address>,
}

impl Published {
    /// Whether the picker's policy has applied the routing that chose `cluster` (always, without one) and
    /// the `resolutions` resolver results published so far.
    pub(super) fn applied(&self, cluster: Option<&RoutedTo>, resolutions: u64) -> bool {
        cluster.is_none_or(|c| c.generation <= self.routing_generation)
            && resolutions <= self.resolutions
    }
}

pub(super) enum Event {
    Ready(SubchannelId, u64, Address, Conn),
    Failed(SubchannelId, u64, Status),
    Closed(SubchannelId, u64),
    /// The server sent GOAWAY: no new stream goes to the connection; its streams finish on it.
    Draining(SubchannelId, u64, GoAway),
    /// The health watch with this serial on a subchannel has news: its latest health (in its slot), and
    /// the status of its end if the server has no health service.
    Health(SubchannelId, u64, Option<Status>),
    ExitIdle,
    Shutdown,
}

/// Counts the calls in flight, and remembers when the last one ended. Calls do not tell the control plane
/// that they start or end (the one message a call sends is `ExitIdle`, when it finds the channel IDLE): its
/// idle timer reads this when it fires (as grpc-go's idleness manager does), so a call costs a
/// clock read and three atomic updates, not a wake-up of the control plane's task.
pub(crate) struct ActiveCalls {
    count: AtomicUsize,
    /// When a call last ended, in nanoseconds since `base` (0: never).
    last_end: AtomicU64,
    base: Instant,
}

impl ActiveCalls {
    pub(super) fn new() -> Arc<ActiveCalls> {
        Arc::new(ActiveCalls {
            count: AtomicUsize::new(0),
            last_end: AtomicU64::new(0),
            base: Instant::now(),
        })
    }

    /// Registers a call; the guard ends it.
    pub(crate) fn call_started(self: &Arc<Self>) -> ActiveCallGuard {
        self.count.fetch_add(1, Ordering::AcqRel);
        ActiveCallGuard(self.clone())
    }

    /// Whether a call is in flight.
    pub(crate) fn in_use(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// When the channel may go idle, asked at `now`: `None` while a call is in flight; otherwise `timeout`
    /// after the last call ended (or `now` if no call ended for that long, or ever). `None` also when that
    /// is too far to represent (never).
    pub(super) fn idle_at(&self, now: Instant, timeout: Duration) -> Option<Instant> {
        if self.in_use() {
            return None;
        }
        match self.last_end.load(Ordering::Acquire) {
            0 => Some(now),
            nanos => self
                .base
                .checked_add(Duration::from_nanos(nanos))
                .and_then(|end| end.checked_add(timeout))
                .map(|at| at.max(now)),
        }
    }
}

/// Held by a call while it runs.
pub(crate) struct ActiveCallGuard(Arc<ActiveCalls>);

impl Drop for ActiveCallGuard {
    fn drop(&mut self) {
        let active = &self.0;
        // The end is noted before the count drops, so an idle timer that sees no call in flight sees every
        // call's end. At least 1 ns, as 0 means "never".
        let nanos = Instant::now()
            .saturating_duration_since(active.base)
            .as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX).max(1);
        active.last_end.fetch_max(nanos, Ordering::AcqRel);
        active.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the event loop writes for `Channel::stats()`: one allocation, shared by the loop and every handle.
#[derive(Default)]
pub(crate) struct PlaneStats {
    /// Outlier detection's ejections (gRFC A50).
    pub(super) ejections: EjectionStats,
    /// The addresses whose health check says not serving (gRFC A17).
    pub(super) health: HealthStats,
    /// Each address's attempts and subchannel state.
    pub(super) addresses: AddressTable,
}

/// The seed of the channel's random sources (the resolver's and the control plane's jitter, address
/// shuffles, the xDS client, request ids): nanoseconds since the Unix epoch, or a fixed value should the
/// clock be set before it. The one place the channel turns the wall clock into randomness; not for secrets.
pub(crate) fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5eed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_at_counts_from_the_last_call_end_and_waits_for_calls_in_flight() {
        let timeout = Duration::from_secs(60);
        let active = ActiveCalls::new();
        let start = Instant::now();
        assert_eq!(active.idle_at(start, timeout), Some(start), "no call ever");
        let a = active.call_started();
        let b = active.call_started();
        tokio::time::advance(Duration::from_secs(10)).await;
        drop(a);
        assert_eq!(active.idle_at(Instant::now(), timeout), None, "b in flight");
        tokio::time::advance(Duration::from_secs(10)).await;
        let b_end = Instant::now();
        drop(b);
        assert_eq!(
            active.idle_at(Instant::now(), timeout),
            Some(b_end + timeout)
        );
        tokio::time::advance(Duration::from_secs(100)).await;
        let now = Instant::now();
        assert_eq!(
            active.idle_at(now, timeout),
            Some(now),
            "quiet for long enough"
        );
        assert_eq!(active.idle_at(now, Duration::MAX), None, "never");
    }
}
