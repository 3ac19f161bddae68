//! The channel's control plane (`doc/connectivity-semantics-and-api.md`, gRFC A61/A62): one event loop per
//! channel that owns the load-balancing policy and the subchannel connections, processes resolver updates
//! and subchannel state changes whether or not calls flow, and publishes an immutable picker for calls.
//!
//! * Resolver updates (endpoints and service config, after A21) feed `update_addresses`; a new
//!   `loadBalancingConfig` replaces the policy.
//! * The policy's `Connect` actions start connection tasks: TCP (TCP_NODELAY), the HTTP/2 handshake, then a
//!   PING whose ACK proves the server's SETTINGS arrived, which makes the subchannel READY (and resets its
//!   backoff). The task then drives the connection and reports when it closes.
//! * Calls pick from the current picker without locking the control plane; a queued call waits for the next
//!   picker, a call that finds the policy IDLE wakes it.
//! * With no call for the idle timeout (30 min by default), the channel drops its connections and goes IDLE;
//!   `close()` (or dropping every handle) makes it SHUTDOWN.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use grpc_lb::{
    Address, BackoffConfig, ConnectivityState, LbAction, LbPolicy, PickRequest, PickResult, Picker,
    PickerSpec, PolicyConfig, SubchannelId, DEFAULT_ATTEMPT_DELAY,
};
use grpc_retry::SplitMix64;
use grpc_service_config::LbConfig;
use h2::client::SendRequest;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::attempt::{Pick, PickError};
use crate::connect::Http2Settings;
use crate::connect::{connect, AbortOnDrop, Established};
use crate::keepalive::{self, Keepalive};
use crate::resolution::{Resolution, State};
use crate::sniff::GoAway;
use crate::status::{Code, Status};
use crate::tls::TlsConnector;

/// How long a channel leaving IDLE waits for a fresh resolution before it uses the last one.
const FRESH_RESOLUTION_WAIT: Duration = Duration::from_secs(1);

/// How long a channel with no calls keeps its connections (A62 recommends 30 minutes).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);

type Conn = SendRequest<Bytes>;

/// What calls see: the state and the picker, swapped together.
pub(crate) struct Published {
    pub(crate) state: ConnectivityState,
    picker: Picker<Conn>,
    /// The last connection failure, kept as the source of the statuses of failed picks.
    last_failure: Option<Status>,
}

enum Event {
    Ready(SubchannelId, u64, Conn),
    Failed(SubchannelId, u64, Status),
    Closed(SubchannelId, u64),
    /// The server sent GOAWAY: no new stream goes to the connection; its streams finish on it.
    Draining(SubchannelId, u64, GoAway),
    ExitIdle,
    Shutdown,
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

/// The handle calls use.
/// Cheap to clone: the channel holds one, and each call's retry driver one to pick with. The loop stops
/// when the last is dropped (or on `close()`).
#[derive(Clone)]
pub(crate) struct ControlPlane {
    events: mpsc::UnboundedSender<Event>,
    published: watch::Receiver<Arc<Published>>,
    active: Arc<ActiveCalls>,
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
    ) -> ControlPlane {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let initial = Arc::new(Published {
            state: ConnectivityState::Idle,
            picker: Picker::new(&PickerSpec::Idle, |_| None, 0),
            last_failure: None,
        });
        let (published_tx, published_rx) = watch::channel(initial);
        let (stop_tx, stop_rx) = oneshot::channel();
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7);
        let active = ActiveCalls::new();
        let lp = Loop {
            resolution,
            settings,
            tls,
            keepalive,
            idle_timeout,
            events_tx: events_tx.clone(),
            published: published_tx,
            policy: None,
            policy_config: None,
            addresses: Vec::new(),
            tasks: HashMap::new(),
            conns: HashMap::new(),
            generation: 0,
            rng: SplitMix64::new(seed),
            active: active.clone(),
            idle_deadline: None,
            idle: true,
            spec: (ConnectivityState::Idle, PickerSpec::Idle),
            retired: None,
            was_active: false,
            fresh_wait: None,
            last_failure: None,
        };
        tokio::spawn(lp.run(events_rx, stop_rx));
        ControlPlane {
            events: events_tx,
            published: published_rx,
            active,
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
        avoid: &[Address],
        cx: &mut Context<'_>,
    ) -> Option<(Conn, Address)> {
        let picked = {
            let published = self.published.borrow();
            if published.state == ConnectivityState::Shutdown {
                return None;
            }
            published.picker.pick(&PickRequest { method, avoid })
        };
        match picked {
            PickResult::Pick { mut handle, addr } => match handle.poll_ready(cx) {
                Poll::Ready(Ok(())) => Some((handle, addr)),
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
        wait_for_ready: bool,
        avoid: Vec<Address>,
        cx: &mut Context<'_>,
    ) -> Pick {
        if let Some(picked) = self.pick_now(uri.path(), &avoid, cx) {
            return Pick::Now(Some(picked));
        }
        let control = self.clone();
        let uri = uri.clone();
        Pick::Later(Box::pin(async move {
            control.pick(uri.path(), wait_for_ready, &avoid).await
        }))
    }

    /// Picks a connection for a call (the caller bounds the wait with the call's deadline).
    pub(crate) async fn pick(
        &self,
        method: &str,
        wait_for_ready: bool,
        avoid: &[Address],
    ) -> Result<(Conn, Address), PickError> {
        let fail = |status| PickError {
            status,
            dropped: false,
        };
        let mut rx = self.published.clone();
        loop {
            let published = rx.borrow_and_update().clone();
            if published.state == ConnectivityState::Shutdown {
                return Err(fail(Status::new(
                    Code::Unavailable,
                    "the channel is shut down",
                )));
            }
            match published.picker.pick(&PickRequest { method, avoid }) {
                PickResult::Pick { handle, addr } => match handle.ready().await {
                    Ok(conn) => return Ok((conn, addr)),
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
                    return Err(fail(match &published.last_failure {
                        Some(cause) => status.with_source(cause.clone()),
                        None => status,
                    }));
                }
                PickResult::Fail(_) => {}
                PickResult::Drop(message) => {
                    return Err(PickError {
                        status: Status::new(Code::Unavailable, message),
                        dropped: true,
                    })
                }
            }
            if rx.changed().await.is_err() {
                return Err(fail(Status::new(
                    Code::Unavailable,
                    "the channel is shut down",
                )));
            }
        }
    }
}

struct Loop {
    resolution: Arc<Resolution>,
    settings: Http2Settings,
    /// TLS for every connection, or plaintext.
    tls: Option<TlsConnector>,
    keepalive: Arc<Keepalive>,
    idle_timeout: Duration,
    events_tx: mpsc::UnboundedSender<Event>,
    published: watch::Sender<Arc<Published>>,
    policy: Option<LbPolicy>,
    policy_config: Option<PolicyConfig>,
    addresses: Vec<Address>,
    tasks: HashMap<SubchannelId, (u64, JoinHandle<()>)>,
    conns: HashMap<SubchannelId, Conn>,
    generation: u64,
    rng: SplitMix64,
    active: Arc<ActiveCalls>,
    idle_deadline: Option<Instant>,
    idle: bool,
    spec: (ConnectivityState, PickerSpec),
    /// The previous policy's READY connections and picker, serving while a new policy connects.
    retired: Option<Retired>,
    /// The channel has left IDLE before (its resolution may be stale when it leaves IDLE again).
    was_active: bool,
    /// Leaving IDLE, waiting until then for a fresh resolution.
    fresh_wait: Option<Instant>,
    last_failure: Option<Status>,
}

impl Drop for Loop {
    fn drop(&mut self) {
        for (_, (_, task)) in self.tasks.drain() {
            task.abort();
        }
    }
}

fn policy_config(lb: &LbConfig) -> PolicyConfig {
    match lb {
        LbConfig::RoundRobin => PolicyConfig::RoundRobin,
        LbConfig::PickFirst {
            shuffle_address_list,
        } => PolicyConfig::PickFirst {
            shuffle_address_list: *shuffle_address_list,
        },
        LbConfig::Default => PolicyConfig::default(),
    }
}

impl Loop {
    async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<Event>,
        mut stop: oneshot::Receiver<()>,
    ) {
        let mut resolution: Option<watch::Receiver<State>> = None;
        loop {
            let timer = [
                self.policy
                    .as_ref()
                    .and_then(|p| p.poll_timeout().map(Instant::from_std)),
                self.idle_deadline,
                self.fresh_wait,
            ]
            .into_iter()
            .flatten()
            .min();
            tokio::select! {
                _ = &mut stop => break,
                event = events.recv() => match event {
                    None | Some(Event::Shutdown) => break,
                    Some(event) => self.on_event(event, &mut resolution).await,
                },
                changed = async {
                    match resolution.as_mut() {
                        Some(rx) => rx.changed().await.map(|()| rx.borrow_and_update().clone()),
                        None => std::future::pending().await,
                    }
                } => match changed {
                    Ok(state) => self.on_resolution(state),
                    Err(_) => resolution = None,
                },
                () = async {
                    match timer {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => {
                    // A connection attempt that timed out at this same instant reports it itself, naming
                    // the step (TCP, TLS, HTTP/2), before the balancer's backstop does: let it run, then
                    // take what it sent.
                    tokio::task::yield_now().await;
                    while let Ok(event) = events.try_recv() {
                        if let Event::Shutdown = event {
                            self.shutdown();
                            return;
                        }
                        self.on_event(event, &mut resolution).await;
                    }
                    self.on_timer();
                    // No fresh resolution in time: go on with the last one (a fresh one updates it later).
                    if self.fresh_wait.is_some_and(|at| at <= Instant::now()) {
                        if let Some(state) = resolution.as_ref().map(|rx| rx.borrow().clone()) {
                            self.on_resolution(state);
                        }
                        self.fresh_wait = None;
                    }
                }
            }
            self.drain_actions();
        }
        self.shutdown();
    }

    async fn on_event(&mut self, event: Event, resolution: &mut Option<watch::Receiver<State>>) {
        if let Event::ExitIdle = event {
            if resolution.is_none() {
                match self.resolution.subscribe().await {
                    Ok(rx) => *resolution = Some(rx),
                    Err(status) => {
                        // The resolver cannot be set up: TRANSIENT_FAILURE, and not the CONNECTING that
                        // leaving IDLE would publish over it. The next call or `connect()` tries again.
                        self.idle = false;
                        self.fail_all(status.message());
                        self.arm_idle_timer();
                        return;
                    }
                }
            }
        }
        self.handle_event(event, resolution.as_ref());
    }

    fn now(&self) -> std::time::Instant {
        Instant::now().into_std()
    }

    fn handle_event(&mut self, event: Event, resolution: Option<&watch::Receiver<State>>) {
        let now = self.now();
        match event {
            Event::Ready(id, generation, conn) if self.is_current(id, generation) => {
                self.conns.insert(id, conn);
                if let Some(p) = self.policy.as_mut() {
                    p.subchannel_ready(id, now);
                }
            }
            Event::Failed(id, generation, error) if self.is_current(id, generation) => {
                self.tasks.remove(&id);
                let message = error.message().to_owned();
                self.last_failure = Some(error);
                if let Some(p) = self.policy.as_mut() {
                    p.subchannel_failed(id, message, now);
                }
            }
            Event::Closed(id, generation) if self.is_current(id, generation) => {
                self.tasks.remove(&id);
                self.conns.remove(&id);
                if let Some(p) = self.policy.as_mut() {
                    p.subchannel_closed(id, now);
                }
            }
            Event::Draining(id, generation, goaway) if self.is_current(id, generation) => {
                tracing::debug!(
                    last_stream_id = goaway.last_stream_id,
                    error_code = goaway.error_code,
                    debug_data = %String::from_utf8_lossy(&goaway.debug_data),
                    "GOAWAY: the connection drains; new calls go to a new one"
                );
                // Detached, not aborted: the connection's task ends when its last stream does.
                drop(self.tasks.remove(&id));
                self.conns.remove(&id);
                if let Some(p) = self.policy.as_mut() {
                    p.subchannel_closed(id, now);
                }
            }
            Event::Ready(..) | Event::Failed(..) | Event::Closed(..) | Event::Draining(..) => {}
            Event::ExitIdle => {
                // Woken with no call in flight (`connect()`, or a call still resolving): the idle timeout runs
                // from now, so a channel that is never used goes IDLE again. Calls disarm nothing: when the
                // timer fires it checks for calls in flight and when the last one ended, and re-arms itself.
                self.arm_idle_timer();
                if self.idle {
                    self.idle = false;
                    // CONNECTING until the policy (or a resolution failure) says otherwise.
                    self.publish(ConnectivityState::Connecting, PickerSpec::Queue);
                    if self.was_active && self.resolution.has_resolver() {
                        // Back from IDLE, the last resolution may be as old as the idle timeout: resolve
                        // again and wait (briefly) for the fresh result rather than connect to old addresses.
                        self.resolution.resolve_now();
                        self.fresh_wait = Some(Instant::now() + FRESH_RESOLUTION_WAIT);
                    } else if let Some(state) = resolution.map(|rx| rx.borrow().clone()) {
                        self.on_resolution(state);
                    }
                    self.was_active = true;
                }
                if let Some(p) = self.policy.as_mut() {
                    p.exit_idle(now);
                }
            }
            Event::Shutdown => {}
        }
    }

    /// Starts the idle timeout (a timeout too large to add to now means never). When it fires, the channel
    /// goes IDLE if no call is in flight and none ended within the timeout; otherwise it is re-armed.
    fn arm_idle_timer(&mut self) {
        self.idle_deadline = Instant::now().checked_add(self.idle_timeout);
    }

    fn is_current(&self, id: SubchannelId, generation: u64) -> bool {
        self.tasks.get(&id).is_some_and(|(g, _)| *g == generation)
    }

    fn on_resolution(&mut self, state: State) {
        if self.idle {
            return;
        }
        self.fresh_wait = None;
        let now = self.now();
        match state {
            State::Pending => {}
            State::Failed(status) => {
                if self.addresses.is_empty() {
                    self.fail_all(status.message());
                }
            }
            State::Ready { endpoints, config } => {
                let wanted = policy_config(config.lb_policy());
                if self.policy_config != Some(wanted) {
                    // A graceful switch: while the new policy connects, the old one's READY connections keep
                    // serving (its last picker), and they close once the new policy is READY.
                    self.retire_policy();
                    // connect_timeout is the connection-backoff spec's MIN_CONNECT_TIMEOUT: every attempt
                    // gets at least that long.
                    let backoff = BackoffConfig {
                        min_connect_timeout: self.settings.connect_timeout,
                        ..BackoffConfig::default()
                    };
                    self.policy = Some(LbPolicy::with(
                        wanted,
                        backoff,
                        DEFAULT_ATTEMPT_DELAY,
                        Box::new(SplitMix64::new(self.rng.next())),
                    ));
                    self.policy_config = Some(wanted);
                }
                self.addresses = endpoints.to_vec();
                if let Some(p) = self.policy.as_mut() {
                    p.update_addresses(self.addresses.clone(), now);
                }
            }
        }
    }

    fn on_timer(&mut self) {
        let now = Instant::now();
        if self.idle_deadline.is_some_and(|d| d <= now) {
            match self.active.idle_at(now, self.idle_timeout) {
                Some(at) if at <= now => {
                    self.idle_deadline = None;
                    self.enter_idle();
                    return;
                }
                // The last call ended less than the timeout ago: check again when it will have.
                Some(at) => self.idle_deadline = Some(at),
                // Calls in flight: the earliest the channel can go idle is a timeout from now.
                None => self.idle_deadline = now.checked_add(self.idle_timeout),
            }
        }
        if let Some(p) = self.policy.as_mut() {
            p.handle_timeout(now.into_std());
        }
    }

    fn enter_idle(&mut self) {
        tracing::debug!("no calls for the idle timeout: the channel goes IDLE");
        self.drop_connections();
        self.policy = None;
        self.policy_config = None;
        self.idle = true;
        self.publish(ConnectivityState::Idle, PickerSpec::Idle);
    }

    fn drop_connections(&mut self) {
        self.drop_retired(true);
        for (_, (_, task)) in self.tasks.drain() {
            task.abort();
        }
        self.conns.clear();
    }

    fn fail_all(&mut self, message: &str) {
        self.publish(
            ConnectivityState::TransientFailure,
            PickerSpec::Fail(message.to_owned()),
        );
    }

    fn shutdown(&mut self) {
        self.drop_connections();
        self.policy = None;
        self.publish(
            ConnectivityState::Shutdown,
            PickerSpec::Fail("the channel is shut down".to_owned()),
        );
    }

    /// Keeps the current policy's connections serving its last picker (if it was READY) while a new
    /// policy starts; otherwise closes them.
    fn retire_policy(&mut self) {
        self.drop_retired(false);
        let tasks: Vec<JoinHandle<()>> = self.tasks.drain().map(|(_, (_, task))| task).collect();
        let conns = std::mem::take(&mut self.conns);
        if self.spec.0 == ConnectivityState::Ready && !conns.is_empty() {
            self.retired = Some(Retired {
                spec: self.spec.1.clone(),
                conns,
                tasks,
            });
        } else {
            for task in tasks {
                task.abort();
            }
        }
    }

    /// Lets go of a retired policy's connections: closed at once (`abort`), or left to finish the calls
    /// they carry (h2 closes a connection whose handles are gone once its last stream ends).
    fn drop_retired(&mut self, abort: bool) {
        if let Some(retired) = self.retired.take() {
            if abort {
                for task in retired.tasks {
                    task.abort();
                }
            }
        }
    }

    fn publish(&mut self, state: ConnectivityState, spec: PickerSpec) {
        // Until the new policy is READY, a retired READY policy keeps serving.
        if state == ConnectivityState::Ready {
            self.drop_retired(false);
        } else if let Some(retired) = &self.retired {
            let start = self.rng.next() as usize;
            let conns = &retired.conns;
            let picker = Picker::new(&retired.spec, |id| conns.get(&id).cloned(), start);
            self.spec = (state, spec);
            let _ = self.published.send(Arc::new(Published {
                state: ConnectivityState::Ready,
                picker,
                last_failure: self.last_failure.clone(),
            }));
            return;
        }
        let start = self.rng.next() as usize;
        let conns = &self.conns;
        let picker = Picker::new(&spec, |id| conns.get(&id).cloned(), start);
        self.spec = (state, spec);
        let _ = self.published.send(Arc::new(Published {
            state,
            picker,
            last_failure: self.last_failure.clone(),
        }));
    }

    fn drain_actions(&mut self) {
        // Only the last picker of a batch is published: the ones before it were never current.
        let mut picker = None;
        while let Some(action) = self.policy.as_mut().and_then(LbPolicy::poll_action) {
            match action {
                LbAction::Connect { id, addr, deadline } => {
                    self.generation += 1;
                    let generation = self.generation;
                    let channel = ChannelParts {
                        settings: self.settings.clone(),
                        tls: self.tls.clone(),
                        keepalive: self.keepalive.clone(),
                        active: self.active.clone(),
                        events: self.events_tx.clone(),
                    };
                    let task = tokio::spawn(connect_subchannel(
                        id,
                        generation,
                        addr,
                        Instant::from_std(deadline),
                        channel,
                    ));
                    if let Some((_, old)) = self.tasks.insert(id, (generation, task)) {
                        old.abort();
                    }
                }
                LbAction::Disconnect { id } => {
                    if let Some((_, task)) = self.tasks.remove(&id) {
                        task.abort();
                    }
                    self.conns.remove(&id);
                }
                LbAction::ResolveNow => self.resolution.resolve_now(),
                LbAction::UpdatePicker {
                    state,
                    picker: spec,
                } => picker = Some((state, spec)),
            }
        }
        if let Some((state, spec)) = picker {
            if !self.idle {
                self.publish(state, spec);
            }
        }
    }
}

trait NextU64 {
    fn next(&mut self) -> u64;
}

impl NextU64 for SplitMix64 {
    fn next(&mut self) -> u64 {
        grpc_retry::Rng::next_u64(self)
    }
}

/// A replaced policy's connections, kept until the new policy is READY.
struct Retired {
    spec: PickerSpec,
    conns: HashMap<SubchannelId, Conn>,
    tasks: Vec<JoinHandle<()>>,
}

/// What a connection task needs of its channel.
struct ChannelParts {
    settings: Http2Settings,
    tls: Option<TlsConnector>,
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
        keepalive,
        active,
        events,
    } = channel;
    let ended = connect(&addr, deadline, &settings, tls.as_ref()).await;
    match ended {
        Ok(Established {
            send,
            driver,
            mut closed,
            seen,
            ping_pong,
        }) => {
            let _ = events.send(Event::Ready(id, generation, send));
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
                status = keepalive::run(keepalive.clone(), ping_pong, seen.clone(), || active.in_use()) => {
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
