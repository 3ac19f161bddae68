//! The channel's control plane (`doc/connectivity-semantics-and-api.md`, gRFC A61/A62): one event loop per
//! channel that owns the load-balancing policy and the subchannel connections, processes resolver updates
//! and subchannel state changes whether or not calls flow, and publishes an immutable picker for calls.
//!
//! * Resolver updates (endpoints and service config, after A21) feed `update_addresses`; a new
//!   `loadBalancingConfig` replaces the policy.
//! * The policy's `Connect` actions start connection tasks (`connect.rs`, for every target kind: TCP or a
//!   Unix socket, TLS when the channel has it, the HTTP/2 handshake, then a PING whose ACK proves the
//!   server's SETTINGS arrived), which make the subchannel READY (and reset its backoff). The task then
//!   drives the connection and reports when it closes, drains (GOAWAY) or stops answering keepalive PINGs.
//! * Calls pick from the current picker without locking the control plane; a queued call waits for the next
//!   picker, a call that finds the policy IDLE wakes it.
//! * With no call for the idle timeout (30 min by default), the channel drops its connections and goes IDLE;
//!   `close()` (or dropping every handle) makes it SHUTDOWN.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use grpc_lb::{
    Address, ConnectivityState, LbPolicy, OutlierDetector, PickRequest, PickResult, Picker,
    PickerSpec, PolicyConfig, SubchannelId,
};
use grpc_service_config::Target;
use h2::client::SendRequest;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

mod event_loop;
mod health_watches;
mod policy_choice;
mod teardown;

use event_loop::Loop;
use health_watches::HealthWatches;

use crate::attempt::{Pick, PickError, Picked};
use crate::connect::{connect, AbortOnDrop, Established, Http2Settings};
use crate::health::{HealthStats, WatchSetup};
use crate::keepalive::{self, Keepalive, OpenStreams};
use crate::outlier::{CallResults, EjectionStats};
use crate::proxy::Route;
use crate::resolution::Resolution;
use crate::resolved::RoutedTo;
use crate::sniff::GoAway;
use crate::status::{Code, Status};
use crate::tls::TlsConnector;

/// How long a channel with no calls keeps its connections (A62 recommends 30 minutes).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// A READY connection as the event loop holds it: where calls open their streams, and the count of the
/// streams the channel itself keeps open on it (the health Watch), which its keepalive reads.
#[derive(Clone)]
struct Conn {
    send: SendRequest<Bytes>,
    streams: OpenStreams,
}

/// What a picker hands out for a READY subchannel: its connection and, while outlier detection is on, its
/// address's call results (an `Arc` clone per pick, no allocation).
#[derive(Clone)]
struct Handle {
    conn: SendRequest<Bytes>,
    results: Option<Arc<CallResults>>,
}

/// What calls see: the state and the picker, swapped together.
pub(crate) struct Published {
    pub(crate) state: ConnectivityState,
    picker: Picker<Handle>,
    /// The last routing (xDS) the picker's policy has applied ([`crate::resolved::Routing::generation`]).
    routing_generation: u64,
    /// The last connection failure, kept as the source of the statuses of failed picks.
    last_failure: Option<Status>,
}

impl Published {
    /// Whether the picker's policy has applied the routing that chose `cluster` (always, without one).
    fn applied(&self, cluster: Option<&RoutedTo>) -> bool {
        cluster.is_none_or(|c| c.generation <= self.routing_generation)
    }
}

enum Event {
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

/// What a connection task needs of its channel.
struct ChannelParts {
    settings: Http2Settings,
    tls: Option<TlsConnector>,
    route: Route,
    keepalive: Arc<Keepalive>,
    active: Arc<ActiveCalls>,
    events: mpsc::UnboundedSender<Event>,
}

/// One connection attempt and, once READY, the connection's life.
async fn connect_subchannel(
    id: SubchannelId,
    generation: u64,
    addr: Address,
    deadline: Instant,
    channel: ChannelParts,
) {
    let ChannelParts {
        settings,
        tls,
        route,
        keepalive,
        active,
        events,
    } = channel;
    let ended = connect(&addr, deadline, &settings, tls.as_ref(), &route).await;
    match ended {
        Ok(Established {
            send,
            driver,
            mut closed,
            seen,
            ping_pong,
        }) => {
            // The streams of the channel's own on this connection (the health Watch): with its calls,
            // they keep keepalive pinging.
            let streams = OpenStreams::default();
            let conn = Conn {
                send,
                streams: streams.clone(),
            };
            let _ = events.send(Event::Ready(id, generation, addr.clone(), conn));
            // Aborting this task (Disconnect) must close the connection too.
            let _abort = AbortOnDrop(driver);
            tokio::select! {
                _ = &mut closed => {
                    let _ = events.send(Event::Closed(id, generation));
                }
                goaway = seen.goaway_received() => {
                    keepalive.on_goaway(&goaway);
                    let _ = events.send(Event::Draining(id, generation, goaway));
                    let _ = closed.await;
                }
                status = keepalive::run(keepalive.clone(), ping_pong, seen.clone(), || active.in_use() || streams.any()) => {
                    // The peer stopped answering: close the connection (its calls fail UNAVAILABLE).
                    tracing::info!(%addr, %status, "closing the connection");
                    let _ = events.send(Event::Closed(id, generation));
                }
            }
        }
        Err(error) => {
            let _ = events.send(Event::Failed(id, generation, error));
        }
    }
}

/// Counts the calls in flight, and remembers when the last one ended. Calls never message the control
/// plane: its idle timer reads this when it fires (as grpc-go's idleness manager does), so a call costs a
/// clock read and three atomic updates, not a wake-up of the control plane's task.
pub(crate) struct ActiveCalls {
    count: AtomicUsize,
    /// When a call last ended, in nanoseconds since `base` (0: never).
    last_end: AtomicU64,
    base: Instant,
}

impl ActiveCalls {
    fn new() -> Arc<ActiveCalls> {
        Arc::new(ActiveCalls {
            count: AtomicUsize::new(0),
            last_end: AtomicU64::new(0),
            base: Instant::now(),
        })
    }

    /// Registers a call; the guard ends it.
    pub(crate) fn call_started(self: &Arc<Self>) -> CallGuard {
        self.count.fetch_add(1, Ordering::AcqRel);
        CallGuard(self.clone())
    }

    /// Whether a call is in flight.
    pub(crate) fn in_use(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// When the channel may go idle, asked at `now`: `None` while a call is in flight; otherwise `timeout`
    /// after the last call ended (or `now` if no call ended for that long, or ever). `None` also when that
    /// is too far to represent (never).
    fn idle_at(&self, now: Instant, timeout: Duration) -> Option<Instant> {
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
pub(crate) struct CallGuard(Arc<ActiveCalls>);

impl Drop for CallGuard {
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
    ejections: EjectionStats,
    /// The addresses whose health check says not serving (gRFC A17).
    health: HealthStats,
}

/// What the event loop is started with.
struct Setup {
    resolution: Arc<Resolution>,
    settings: Http2Settings,
    /// TLS for every connection, or plaintext.
    tls: Option<TlsConnector>,
    /// Which connections go through an HTTP CONNECT proxy.
    route: Route,
    keepalive: Arc<Keepalive>,
    idle_timeout: Duration,
    /// The health watches (A17).
    health: HealthWatches,
}

/// Whether the channel is IDLE (gRFC A62: no call for the idle timeout), and what exists only while it is
/// not: the idle timer, the load-balancing policy and the outlier detector.
///
/// ```text
///   Idle ──a call, `connect()`──▶ Active ──no call for the idle timeout──▶ Idle
/// ```
// One per channel, in its event loop: boxing the active side would cost an allocation each time the
// channel leaves IDLE, and save nothing.
#[allow(clippy::large_enum_variant)]
enum Activity {
    /// No policy, no connections, no timer: the next call or `connect()` makes the channel leave IDLE.
    Idle {
        /// The channel left IDLE with a resolution before, which may now be as old as the idle timeout.
        resolved_before: bool,
    },
    /// Out of IDLE.
    Active(Active),
}

/// What an active channel has.
struct Active {
    /// When the idle timer fires (`None`: never; a timeout too large to add to now).
    idle_deadline: Option<Instant>,
    /// Leaving IDLE, waiting until then for a fresh resolution.
    fresh_wait: Option<Instant>,
    /// The policy, from the first resolution on (none again after a routing resolver failed).
    policy: Option<Policy>,
    /// Outlier detection, when the config has it.
    outlier: Option<OutlierDetector>,
    /// The channel left IDLE with a resolution (not when its resolver could not be set up): its
    /// resolution may be stale when it leaves IDLE again.
    resolved: bool,
}

/// The load-balancing policy, and the config it was made from.
struct Policy {
    lb: LbPolicy,
    config: PolicyConfig,
}

impl Activity {
    fn is_idle(&self) -> bool {
        matches!(self, Activity::Idle { .. })
    }

    /// Leaves IDLE (if the channel is IDLE), with or without a resolution to use; if it was IDLE, whether
    /// it had left IDLE with a resolution before.
    fn leave_idle(&mut self, resolution: bool) -> Option<bool> {
        let Activity::Idle { resolved_before } = *self else {
            return None;
        };
        *self = Activity::Active(Active {
            idle_deadline: None,
            fresh_wait: None,
            policy: None,
            outlier: None,
            resolved: resolution || resolved_before,
        });
        Some(resolved_before)
    }

    /// The active channel's state, `None` when IDLE.
    fn active(&mut self) -> Option<&mut Active> {
        match self {
            Activity::Active(active) => Some(active),
            Activity::Idle { .. } => None,
        }
    }

    fn policy(&mut self) -> Option<&mut LbPolicy> {
        self.active()?.policy.as_mut().map(|p| &mut p.lb)
    }

    fn outlier(&mut self) -> Option<&mut OutlierDetector> {
        self.active()?.outlier.as_mut()
    }

    /// The earliest of the active channel's timers: the policy's, the idle timer, the wait for a fresh
    /// resolution, the outlier detector's sweep.
    fn next_timer(&self) -> Option<Instant> {
        let Activity::Active(a) = self else {
            return None;
        };
        [
            a.policy
                .as_ref()
                .and_then(|p| p.lb.poll_timeout().map(Instant::from_std)),
            a.idle_deadline,
            a.fresh_wait,
            a.outlier
                .as_ref()
                .and_then(|d| d.poll_timeout().map(Instant::from_std)),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// The handle calls use.
/// Cheap to clone: the channel holds one, and each call's retry driver one to pick with. The loop stops
/// when the last is dropped (or on `close()`).
#[derive(Clone)]
pub(crate) struct ControlPlane {
    events: mpsc::UnboundedSender<Event>,
    published: watch::Receiver<Arc<Published>>,
    active: Arc<ActiveCalls>,
    /// Ejections and health, as the event loop last wrote them.
    stats: Arc<PlaneStats>,
    _stop: Arc<oneshot::Sender<()>>,
}

impl ControlPlane {
    /// Starts the control plane on the current runtime.
    pub(crate) fn start(
        resolution: Arc<Resolution>,
        settings: Http2Settings,
        idle_timeout: Duration,
        keepalive: Arc<Keepalive>,
        tls: Option<TlsConnector>,
        route: Route,
        health_checks: Option<WatchSetup>,
    ) -> ControlPlane {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let initial = Arc::new(Published {
            state: ConnectivityState::Idle,
            picker: Picker::new(&PickerSpec::Idle, |_| None, 0),
            routing_generation: 0,
            last_failure: None,
        });
        let (published_tx, published_rx) = watch::channel(initial);
        let (stop_tx, stop_rx) = oneshot::channel();
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7);
        let active = ActiveCalls::new();
        let stats = Arc::new(PlaneStats::default());
        let setup = Setup {
            resolution,
            settings,
            tls,
            route,
            keepalive,
            idle_timeout,
            health: HealthWatches::new(health_checks, stats.clone()),
        };
        let lp = Loop::new(
            setup,
            events_tx.clone(),
            published_tx,
            active.clone(),
            stats.clone(),
            seed,
        );
        tokio::spawn(lp.run(events_rx, stop_rx));
        ControlPlane {
            events: events_tx,
            published: published_rx,
            active,
            stats,
            _stop: Arc::new(stop_tx),
        }
    }

    /// Registers a call; the guard ends it.
    pub(crate) fn call_started(&self) -> CallGuard {
        self.active.call_started()
    }

    /// The channel's connectivity state.
    pub(crate) fn state(&self) -> ConnectivityState {
        self.published.borrow().state
    }

    /// The addresses outlier detection ejected now, and how often each address was ejected.
    pub(crate) fn ejections(&self) -> (Vec<String>, std::collections::BTreeMap<String, u64>) {
        self.stats.ejections.snapshot()
    }

    /// The addresses whose connection is READY but whose health check does not say SERVING.
    pub(crate) fn not_serving(&self) -> Vec<String> {
        self.stats.health.snapshot()
    }

    /// Leaves IDLE (as a call would).
    pub(crate) fn connect(&self) {
        let _ = self.events.send(Event::ExitIdle);
    }

    /// A call is about to wait for resolution: an IDLE channel leaves IDLE now, so that a resolution failure
    /// shows as TRANSIENT_FAILURE even when the call fails before it picks.
    pub(crate) fn call_coming(&self) {
        if self.published.borrow().state == ConnectivityState::Idle {
            let _ = self.events.send(Event::ExitIdle);
        }
    }

    /// Shuts the channel down.
    pub(crate) fn close(&self) {
        let _ = self.events.send(Event::Shutdown);
    }

    /// Waits until the state is not `from`; returns the new state.
    pub(crate) async fn wait_for_state_change(&self, from: ConnectivityState) -> ConnectivityState {
        let mut rx = self.published.clone();
        loop {
            let state = rx.borrow_and_update().state;
            if state != from {
                return state;
            }
            if rx.changed().await.is_err() {
                return ConnectivityState::Shutdown;
            }
        }
    }

    /// A pick that needs no waiting: the picker's choice, when it is a connection ready for a new stream now.
    /// `None` in every other case (queue, fail, drop, shut down, a connection not ready), which
    /// [`ControlPlane::pick`] handles.
    pub(crate) fn pick_now(
        &self,
        method: &str,
        cluster: Option<&RoutedTo>,
        avoid: &[Address],
        cx: &mut Context<'_>,
    ) -> Option<Picked> {
        let picked = {
            let published = self.published.borrow();
            if published.state == ConnectivityState::Shutdown || !published.applied(cluster) {
                return None;
            }
            published.picker.pick(&PickRequest {
                method,
                avoid,
                cluster: cluster.map(|c| &*c.cluster),
                hash: cluster.and_then(|c| c.hash),
            })
        };
        match picked {
            PickResult::Pick {
                mut handle,
                addr,
                guard,
            } => match handle.conn.poll_ready(cx) {
                Poll::Ready(Ok(())) => Some(Picked {
                    conn: handle.conn,
                    addr,
                    results: handle.results,
                    breaker: guard,
                }),
                Poll::Ready(Err(_)) | Poll::Pending => None,
            },
            _ => None,
        }
    }

    /// A pick for one attempt of a call to `uri`: at once when the balancer's choice is a connection ready
    /// for a new stream (no future to box and drive), otherwise a future that waits as the picker says
    /// (the caller bounds it with the call's deadline).
    pub(crate) fn pick_for(
        &self,
        uri: &http::Uri,
        cluster: Option<RoutedTo>,
        wait_for_ready: bool,
        avoid: Vec<Address>,
        cx: &mut Context<'_>,
    ) -> Pick {
        if let Some(picked) = self.pick_now(uri.path(), cluster.as_ref(), &avoid, cx) {
            return Pick::Now(Some(picked));
        }
        let control = self.clone();
        let uri = uri.clone();
        Pick::Later(Box::pin(async move {
            control
                .pick(uri.path(), cluster.as_ref(), wait_for_ready, &avoid)
                .await
        }))
    }

    /// Leaves IDLE and waits until the channel is READY (`Ok`) or in TRANSIENT_FAILURE or SHUTDOWN (the
    /// error): for channels whose picks need a call's route (xDS), where a pick cannot say it. Each time
    /// the channel is IDLE it is asked to leave it again: a policy may come up IDLE after the first ask
    /// (ring_hash clusters connect only when asked, and the first ask may come before the resolution).
    pub(crate) async fn ready_by_state(&self, target: &Target) -> Result<(), Status> {
        self.connect();
        loop {
            let from = self.state();
            match from {
                ConnectivityState::Ready => return Ok(()),
                ConnectivityState::TransientFailure => {
                    return Err(Status::unavailable(format!(
                        "cannot connect to {target}: no cluster it routes to is reachable"
                    )))
                }
                ConnectivityState::Shutdown => {
                    return Err(Status::unavailable("the channel is shut down"))
                }
                ConnectivityState::Idle => {
                    self.connect();
                    self.wait_for_state_change(from).await;
                }
                ConnectivityState::Connecting => {
                    self.wait_for_state_change(from).await;
                }
            }
        }
    }

    /// Picks a connection for a call (the caller bounds the wait with the call's deadline).
    pub(crate) async fn pick(
        &self,
        method: &str,
        cluster: Option<&RoutedTo>,
        wait_for_ready: bool,
        avoid: &[Address],
    ) -> Result<Picked, PickError> {
        let mut rx = self.published.clone();
        loop {
            let published = rx.borrow_and_update().clone();
            if published.state == ConnectivityState::Shutdown {
                return Err(PickError::Failed(Status::new(
                    Code::Unavailable,
                    "the channel is shut down",
                )));
            }
            // A call routed by a routing the load balancer has not applied yet waits for it.
            let result = match published.applied(cluster) {
                true => published.picker.pick(&PickRequest {
                    method,
                    avoid,
                    cluster: cluster.map(|c| &*c.cluster),
                    hash: cluster.and_then(|c| c.hash),
                }),
                false => PickResult::Queue { exit_idle: false },
            };
            match result {
                PickResult::Pick {
                    handle,
                    addr,
                    guard,
                } => match handle.conn.ready().await {
                    Ok(conn) => {
                        return Ok(Picked {
                            conn,
                            addr,
                            results: handle.results,
                            breaker: guard,
                        })
                    }
                    // The connection died under the pick: its task reports it, and a new picker follows.
                    Err(e) => {
                        tracing::debug!(%addr, error = %e, "picked connection is gone; waiting for a new picker")
                    }
                },
                PickResult::Queue { exit_idle } => {
                    if exit_idle {
                        let _ = self.events.send(Event::ExitIdle);
                    }
                }
                PickResult::Fail(message) if !wait_for_ready => {
                    let status = Status::new(Code::Unavailable, message);
                    return Err(PickError::Failed(match &published.last_failure {
                        Some(cause) => status.with_source(cause.clone()),
                        None => status,
                    }));
                }
                PickResult::Fail(_) => {}
                PickResult::Drop(message) => {
                    return Err(PickError::Dropped(Status::new(Code::Unavailable, message)))
                }
            }
            if rx.changed().await.is_err() {
                return Err(PickError::Failed(Status::new(
                    Code::Unavailable,
                    "the channel is shut down",
                )));
            }
        }
    }
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
