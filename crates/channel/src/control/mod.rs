//! The channel's control plane (`doc/connectivity-semantics-and-api.md`, gRFC A61/A62): one event loop per
//! channel that owns the load-balancing policy and the subchannel connections, processes resolver updates
//! and subchannel state changes whether or not calls flow, and publishes an immutable picker for calls.
//!
//! * Resolver updates (endpoints and service config, after A21) feed `update_addresses`; a new
//!   `loadBalancingConfig` replaces the policy.
//! * The policy's `Connect` actions start connection tasks (`conn/connect.rs`, for every target kind: TCP or a
//!   Unix socket, TLS when the channel has it, the HTTP/2 handshake, then a PING whose ACK proves the
//!   server's SETTINGS arrived), which make the subchannel READY (and reset its backoff). The task then
//!   drives the connection and reports when it closes, drains (GOAWAY) or stops answering keepalive PINGs.
//! * Calls pick from the current picker without locking the control plane; a queued call waits for the next
//!   picker, a call that finds the policy IDLE wakes it.
//! * With no call for the idle timeout (30 min by default), the channel drops its connections and goes IDLE;
//!   `close()` (or dropping every handle) makes it SHUTDOWN.
//!
//! The control layer, above `conn` (it makes connections) and below `call` (calls pick from it). Here: the
//! handle calls use ([`ControlPlane`]) and what a pick gives ([`Picked`]); what the handle and the loop share
//! (`shared.rs`); the event loop (`event_loop.rs`), its idleness and what it is started with (`activity.rs`),
//! and each subchannel connection's task (`subchannel.rs`); which policy a resolution asks for
//! (`policy_choice.rs`); name resolution ([`resolver_api`], the public resolver API, and
//! `resolver_testing.rs`, its sink for a resolver's unit tests; [`resolver`], running the channel's resolver;
//! [`builtin_resolvers`], `dns:` and the fixed lists; [`manual_resolver`], endpoints pushed by the
//! application; [`resolver_state`], what a resolver hands the channel); health checking (gRFC A17:
//! [`health_stream`], one Watch stream, and `health_watches.rs`, which connections run one); and outlier
//! detection's call results ([`outlier`], gRFC A50); the per-address figures of `Channel::stats()`
//! ([`address_stats`]); the transports subchannels connect with besides the channel's own
//! ([`transports`], A29's per-cluster TLS, filled by the xDS resolver); and what the loop says about a service config it applies (`config_notes.rs`: health
//! checking the policy does not run, the default pick_first, clamped values). The xDS resolver is a
//! [`resolver_api::ResolverBuilder`] too, in `xds/`, above: it runs its ADS stream on a `Channel`, and hands
//! its routing through a crate-private extension of the sink.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use grpc_lb::{Address, ConnectivityState, PickRequest, PickResult, Picker, PickerSpec};
use grpc_service_config::Target;
use h2::client::SendRequest;
use tokio::sync::{mpsc, oneshot, watch};

mod activity;
pub(crate) mod address_stats;
pub(crate) mod builtin_resolvers;
mod config_notes;
mod event_loop;
mod graceful_switch;
pub(crate) mod health_stream;
mod health_watches;
pub(crate) mod manual_resolver;
pub(crate) mod outlier;
mod policy_choice;
pub(crate) mod resolver;
pub mod resolver_api;
pub(crate) mod resolver_state;
mod resolver_testing;
mod shared;
mod subchannel;
pub(crate) mod transports;

use activity::Setup;
use event_loop::Loop;
use health_watches::HealthWatches;
pub(crate) use shared::{clock_seed, ActiveCallGuard};
use shared::{ActiveCalls, Event, PlaneStats, Published};

use crate::conn::connect::Http2Settings;
use crate::conn::keepalive::Keepalive;
use crate::conn::proxy::Route;
use crate::conn::tls::TlsConnector;
use crate::control::health_stream::WatchSetup;
use crate::control::outlier::CallResults;
use crate::control::resolver::Resolution;
use crate::control::resolver_api::PublishCount;
use crate::control::resolver_state::RoutedTo;
use crate::wire::status::{Code, Status};

/// How long a channel with no calls keeps its connections (A62 recommends 30 minutes).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// A pick that failed, and the call's status.
pub(crate) enum PickError {
    /// No connection for the call: the picker failed it (a call not waiting for ready), or the channel is
    /// shut down.
    Failed(Status),
    /// The load balancer dropped the call (an xDS drop category, or its cluster's circuit breaker): never
    /// retried.
    Dropped(Status),
}

impl PickError {
    /// The call's status.
    pub(crate) fn into_status(self) -> Status {
        match self {
            PickError::Failed(status) | PickError::Dropped(status) => status,
        }
    }
}

/// A connection chosen for an attempt, and its address (a socket address, or a Unix socket path).
pub(crate) struct Picked {
    pub(crate) conn: SendRequest<Bytes>,
    pub(crate) addr: Address,
    /// Where the attempt's result counts, while outlier detection is on.
    pub(crate) results: Option<Arc<CallResults>>,
    /// The pick's guard: the attempt's place under its cluster's circuit breaker (xDS, gRFC A32), or a
    /// custom picker's guard (e.g. its count of calls in flight), released when the attempt goes.
    pub(crate) breaker: Option<grpc_lb::PickGuard>,
}

pub(crate) type PickFuture = Pin<Box<dyn Future<Output = Result<Picked, PickError>> + Send>>;

/// How an attempt gets its connection.
pub(crate) enum Pick {
    /// Picked at once: the picker chose a connection ready for a new stream (taken when the attempt opens).
    Now(Option<Picked>),
    /// A pick that waits (queued, failing, or a connection not ready yet).
    Later(PickFuture),
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
    /// What the resolver published: a pick waits until the picker's policy has applied it all.
    resolutions: Arc<PublishCount>,
    _stop: Arc<oneshot::Sender<()>>,
}

impl ControlPlane {
    /// Starts the control plane on the current runtime.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        resolution: Arc<Resolution>,
        settings: Http2Settings,
        idle_timeout: Duration,
        keepalive: Arc<Keepalive>,
        tls: Option<TlsConnector>,
        route: Route,
        health_checks: Option<WatchSetup>,
        policies: grpc_lb::PolicyRegistry,
    ) -> ControlPlane {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let initial = Arc::new(Published {
            state: ConnectivityState::Idle,
            picker: Picker::new(&PickerSpec::Idle, |_| None, 0),
            routing_generation: 0,
            resolutions: 0,
            last_failure: None,
            last_failure_address: None,
        });
        let resolutions = resolution.published();
        let (published_tx, published_rx) = watch::channel(initial);
        let (stop_tx, stop_rx) = oneshot::channel();
        let seed = shared::clock_seed();
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
            policies,
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
            resolutions,
            _stop: Arc::new(stop_tx),
        }
    }

    /// Registers a call; the guard ends it.
    pub(crate) fn call_started(&self) -> ActiveCallGuard {
        self.active.call_started()
    }

    /// The channel's connectivity state.
    pub(crate) fn state(&self) -> ConnectivityState {
        self.published.borrow().state
    }

    /// The last connection failure the control plane saw since the channel was last READY or IDLE, and the
    /// address it was to, for the message of a call whose deadline passed while it waited for a connection.
    pub(crate) fn last_failure(&self) -> Option<(Status, Option<Address>)> {
        let published = self.published.borrow();
        published
            .last_failure
            .clone()
            .map(|s| (s, published.last_failure_address.clone()))
    }

    /// Each address's attempts and its subchannel's state (`address_stats.rs`).
    pub(crate) fn address_stats(
        &self,
    ) -> std::collections::HashMap<String, address_stats::AddressStats> {
        self.stats.addresses.snapshot()
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
            if published.state == ConnectivityState::Shutdown
                || !published.applied(cluster, self.resolutions.get())
            {
                return None;
            }
            published.picker.pick(
                &PickRequest::new(method)
                    .with_avoid(avoid)
                    .with_cluster(cluster.map(|c| &*c.cluster))
                    .with_hash(cluster.and_then(|c| c.hash)),
            )
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
        // What the resolver had published when the pick started (read once: a resolver publishing without
        // pause must not starve it).
        let resolutions = self.resolutions.get();
        loop {
            let published = rx.borrow_and_update().clone();
            if published.state == ConnectivityState::Shutdown {
                return Err(PickError::Failed(Status::new(
                    Code::Unavailable,
                    "the channel is shut down",
                )));
            }
            // A call routed by a routing the load balancer has not applied yet waits for it, and so does
            // one that started after a resolver result the load balancer has not applied yet (an IDLE
            // channel applies it when it leaves IDLE).
            let result = match published.applied(cluster, resolutions) {
                true => published.picker.pick(
                    &PickRequest::new(method)
                        .with_avoid(avoid)
                        .with_cluster(cluster.map(|c| &*c.cluster))
                        .with_hash(cluster.and_then(|c| c.hash)),
                ),
                false => PickResult::Queue {
                    exit_idle: published.state == ConnectivityState::Idle,
                },
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
                PickResult::Queue { exit_idle: true } => {
                    let _ = self.events.send(Event::ExitIdle);
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
                // Queued (the policy is awake), or a kind of result this channel does not know yet: wait
                // for the next picker.
                _ => {}
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
