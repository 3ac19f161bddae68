//! The control plane's event loop: it owns the load-balancing policy and the subchannel connection tasks,
//! applies resolution results, runs the idle timer, switches policies gracefully, and publishes each new
//! picker. Started by [`super::ControlPlane::start`]; ends when the last handle is dropped or on `close()`.
//!
//! Every policy, built-in or the application's, is a `grpc_lb::LoadBalancer` made by the builder the
//! service config names (`policy_choice.rs`) and driven through a `grpc_lb::LbPolicy`: a resolution that
//! names the running policy gives it the new config and endpoints; another name starts a new one (a
//! graceful switch). A policy that panics is gone: `LbPolicy` publishes a failing picker (UNAVAILABLE,
//! "load-balancing policy ... panicked"), the loop lets go of the policy and its connections and asks the
//! resolver to resolve again, and the resolution that answers builds a new one. The policy's `Drop`, its
//! pickers' and its pick guards' are caught by `grpc_lb` (a panic there is forgotten).
//!
//! Outlier detection (gRFC A50): with an `outlier_detection_experimental` config the loop owns a detector
//! beside the child policy (`grpc_lb::OutlierDetectors`, one scope over the policy's address list); with an
//! xDS routing, one detector per cluster whose Cluster has an `outlier_detection` (A50's xDS mapping), over
//! that cluster's endpoint addresses, each counting the calls its cluster served (a per-cluster counter in
//! that cluster's picker handles) and ejecting from its cluster's picks only (`LbPolicy::
//! set_ejected_in_cluster`; a cluster without one ejects nothing; the detectors go with their clusters);
//! every READY subchannel's picker handle carries its address's [`CallResults`], which calls count into
//! (for the per-address stats too) and,
//! while the detector has an algorithm, the loop takes into it just before each sweep (its timer is one of
//! the loop's, its randomness the loop's rng). After a sweep, the loop logs why each address with failures
//! was not ejected (DEBUG). An ejection or un-ejection goes to the policy (`LbPolicy::eject`, `uneject`: the
//! subchannel looks TRANSIENT_FAILURE, its connection stays), to tracing, and to the channel's stats. The
//! policy and the detector are compared and replaced separately: a new outlier config alone keeps the child
//! policy and its connections.
//!
//! Health checking (gRFC A17): the service config's `healthCheckConfig` (unless the application turned it
//! off) turns the policy's health checking on; [`super::health_watches`] then runs a Watch on each of the
//! policy's READY connections and gives the answers to the policy (`LbPolicy::set_health`).
//!
//! Outlier detection's driving and the per-address counters are in `event_loop/call_results.rs`. The loop
//! lets go of connections in three ways (`event_loop/release.rs`): all at once (IDLE, shutdown),
//! released (a routing resolver that failed) or retired (a policy switch). Not here: a connection's own
//! task (`subchannel.rs`), what the loop shares with its handle (`shared.rs`), and the loop's idleness and
//! what it is started with (`activity.rs`).

mod call_results;
mod release;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use grpc_lb::{
    Address, BackoffConfig, BuildOptions, ConnectivityState, Endpoint, Health, LbAction, LbPolicy,
    OutlierDetectors, Picker, PickerSpec, SubchannelId,
};
use grpc_retry::SplitMix64;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::activity::{Activity, Policy, Setup};
use super::config_notes::ConfigNotes;
use super::graceful_switch::Retired;
use super::health_watches::HealthWatches;
use super::policy_choice::policy_choice;
use super::shared::{ActiveCalls, Conn, Event, Handle, PlaneStats, Published};
use super::subchannel::{connect_subchannel, ChannelParts};
use crate::conn::connect::Http2Settings;
use crate::conn::keepalive::Keepalive;
use crate::conn::proxy::Route;
use crate::conn::tls::TlsConnector;
use crate::control::outlier::CallResults;
use crate::control::resolver::Resolution;
use crate::control::resolver_state::State;
use crate::wire::status::Status;

/// The control plane's event loop (see the module docs of `control`).
pub(super) struct Loop {
    resolution: Arc<Resolution>,
    settings: Http2Settings,
    /// TLS for every connection, or plaintext.
    tls: Option<TlsConnector>,
    /// Which connections go through an HTTP CONNECT proxy.
    route: Route,
    keepalive: Arc<Keepalive>,
    idle_timeout: Duration,
    events_tx: mpsc::UnboundedSender<Event>,
    published: watch::Sender<Arc<Published>>,
    /// IDLE, or active with the policy and what goes with it.
    activity: Activity,
    addresses: Vec<Address>,
    tasks: HashMap<SubchannelId, (u64, JoinHandle<()>)>,
    /// Each READY subchannel's connection, and the address it is connected to.
    conns: HashMap<SubchannelId, (Address, Conn)>,
    generation: u64,
    rng: SplitMix64,
    /// The calls in flight, which the idle timer reads.
    calls: Arc<ActiveCalls>,
    spec: (ConnectivityState, PickerSpec),
    /// The last routing (xDS) applied to the policy, published with each picker.
    routing_generation: u64,
    /// How many resolver results the policy has applied (a lower bound), published with each picker.
    resolutions: u64,
    /// The last resolution routed calls (xDS): a failure then fails the channel whatever its addresses.
    routed: bool,
    /// The previous policy's READY connections and picker, serving while a new policy connects.
    retired: Option<Retired>,
    /// The tasks of READY connections the policy let go of (`Disconnect`), finishing the calls they carry;
    /// those that ended are pruned when the list is full (so a `Disconnect` costs O(1) amortized, however
    /// many connections an address list drops), the others aborted when the channel closes.
    detached: Vec<JoinHandle<()>>,
    /// The last connection error since the channel was last READY or IDLE, and its address (cleared on
    /// either: only an error a waiting call waited through is quoted in its DEADLINE_EXCEEDED message).
    last_failure: Option<Status>,
    last_failure_address: Option<Address>,
    /// Each address's call results, for every address in the list: the per-address stats, and outlier
    /// detection's counts while it has an algorithm.
    results: HashMap<Address, Arc<CallResults>>,
    /// With xDS outlier detection: per cluster that has one, each of its addresses' results in that
    /// cluster (the counts its detector takes; the stats go to `results`), handed out by that cluster's
    /// picks only.
    cluster_results: HashMap<String, HashMap<Address, Arc<CallResults>>>,
    /// What `Channel::stats()` shows of the ejections and health.
    stats: Arc<PlaneStats>,
    /// When each ejected address was ejected, for the trace of its return.
    ejected_since: HashMap<Address, std::time::Instant>,
    /// The health watches (A17).
    health: HealthWatches,
    /// Where the default policy is looked up (`policy_choice.rs`).
    policies: grpc_lb::PolicyRegistry,
    /// What the loop said about the last service config it applied (`config_notes.rs`).
    notes: ConfigNotes,
    /// The address of each subchannel the policy asked to connect, until it lets go of it (for the
    /// per-address states of `Channel::stats()`).
    subchannel_addresses: HashMap<SubchannelId, Address>,
    /// Whether outlier detection counted at the last `sync_results` (its counts start from zero when it
    /// starts counting).
    outlier_counting: bool,
}

/// However the loop ends (its task returned, panicked or was cancelled), every connection task stops: the
/// policy's, those it let go of, and a retired policy's. This runs before the fields drop (the policy and
/// the pickers, whose `Drop` is the application's code and caught by `grpc_lb`).
impl Drop for Loop {
    fn drop(&mut self) {
        for (_, (_, task)) in self.tasks.drain() {
            task.abort();
        }
        for task in self.detached.drain(..) {
            task.abort();
        }
        if let Some(retired) = self.retired.take() {
            retired.release(true);
        }
    }
}

impl Loop {
    /// A loop for `setup`, which sends its events to itself through `events_tx`, publishes through
    /// `published`, counts the channel's calls in `calls` and writes its stats into `stats`.
    pub(super) fn new(
        setup: Setup,
        events_tx: mpsc::UnboundedSender<Event>,
        published: watch::Sender<Arc<Published>>,
        calls: Arc<ActiveCalls>,
        stats: Arc<PlaneStats>,
        seed: u64,
    ) -> Loop {
        Loop {
            resolution: setup.resolution,
            settings: setup.settings,
            tls: setup.tls,
            route: setup.route,
            keepalive: setup.keepalive,
            idle_timeout: setup.idle_timeout,
            events_tx,
            published,
            activity: Activity::Idle {
                resolved_before: false,
            },
            routing_generation: 0,
            resolutions: 0,
            routed: false,
            addresses: Vec::new(),
            tasks: HashMap::new(),
            conns: HashMap::new(),
            generation: 0,
            rng: SplitMix64::new(seed),
            calls,
            spec: (ConnectivityState::Idle, PickerSpec::Idle),
            retired: None,
            detached: Vec::new(),
            last_failure: None,
            last_failure_address: None,
            results: HashMap::new(),
            cluster_results: HashMap::new(),
            health: setup.health,
            policies: setup.policies,
            stats,
            ejected_since: HashMap::new(),
            notes: ConfigNotes::default(),
            subchannel_addresses: HashMap::new(),
            outlier_counting: false,
        }
    }

    pub(super) async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<Event>,
        mut stop: oneshot::Receiver<()>,
    ) {
        let mut resolution: Option<watch::Receiver<State>> = None;
        let count = self.resolution.published();
        loop {
            let timer = self.activity.next_timer();
            tokio::select! {
                _ = &mut stop => break,
                event = events.recv() => match event {
                    None | Some(Event::Shutdown) => break,
                    Some(event) => self.on_event(event, &mut resolution).await,
                },
                changed = async {
                    match resolution.as_mut() {
                        // The count read while the state is borrowed is that state's.
                        Some(rx) => rx.changed().await.map(|()| {
                            let state = rx.borrow_and_update();
                            (count.get(), state.clone())
                        }),
                        None => std::future::pending().await,
                    }
                } => match changed {
                    Ok((seen, state)) => self.on_resolution(state, seen),
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
                    if self.activity.fresh_wait_ran_out(Instant::now()) {
                        if let Some(rx) = resolution.as_ref() {
                            let (seen, state) = {
                                let state = rx.borrow();
                                (count.get(), state.clone())
                            };
                            self.on_resolution(state, seen);
                        }
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
                        self.activity.leave_idle(false);
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
            Event::Ready(id, generation, addr, conn) if self.is_current(id, generation) => {
                self.stats
                    .addresses
                    .set_state(&addr, id, ConnectivityState::Ready);
                if let Some(p) = self.activity.policy() {
                    p.subchannel_ready(id, now);
                    let seed = self.rng.next();
                    self.health
                        .start(p, id, &addr, &conn, &self.events_tx, seed);
                }
                self.conns.insert(id, (addr, conn));
            }
            Event::Failed(id, generation, error) if self.is_current(id, generation) => {
                self.set_subchannel_state(id, ConnectivityState::TransientFailure);
                self.tasks.remove(&id);
                self.health.stop(id);
                let message = error.message().to_owned();
                self.last_failure = Some(error);
                self.last_failure_address = self.subchannel_addresses.get(&id).cloned();
                if let Some(p) = self.activity.policy() {
                    p.subchannel_failed(id, message, now);
                }
            }
            Event::Closed(id, generation) if self.is_current(id, generation) => {
                self.set_subchannel_state(id, ConnectivityState::Idle);
                self.tasks.remove(&id);
                self.health.stop(id);
                self.conns.remove(&id);
                if let Some(p) = self.activity.policy() {
                    p.subchannel_closed(id, now);
                }
            }
            Event::Draining(id, generation, goaway) if self.is_current(id, generation) => {
                self.set_subchannel_state(id, ConnectivityState::Idle);
                let addr = self.conns.get(&id).map(|(addr, _)| addr.to_string());
                tracing::debug!(
                    addr = addr.as_deref().unwrap_or("?"),
                    last_stream_id = goaway.last_stream_id,
                    error_code = goaway.error_code,
                    debug_data = %String::from_utf8_lossy(&goaway.debug_data),
                    "GOAWAY: the connection drains; new calls go to a new one"
                );
                // Detached, not aborted: the connection's task ends when its last stream does.
                drop(self.tasks.remove(&id));
                self.health.stop(id);
                self.conns.remove(&id);
                if let Some(p) = self.activity.policy() {
                    p.subchannel_closed(id, now);
                }
            }
            Event::Ready(..) | Event::Failed(..) | Event::Closed(..) | Event::Draining(..) => {}
            Event::Health(id, serial, unimplemented) => {
                self.health
                    .on_report(self.activity.policy(), id, serial, unimplemented, now);
                if let (Some((addr, _)), Some(p)) = (self.conns.get(&id), self.activity.policy()) {
                    if let Some(health) = p.health(addr) {
                        self.stats.addresses.set_health(addr, health);
                    }
                }
            }
            Event::ExitIdle => {
                if let Some(resolved_before) = self.activity.leave_idle(true) {
                    // CONNECTING until the policy (or a resolution failure) says otherwise.
                    self.publish(ConnectivityState::Connecting, PickerSpec::Queue);
                    if resolved_before && self.resolution.has_resolver() {
                        // Back from IDLE, the last resolution may be as old as the idle timeout: resolve
                        // again and wait (briefly) for the fresh result rather than connect to old addresses.
                        self.resolution.resolve_now();
                        self.activity.wait_for_fresh_resolution();
                    } else {
                        if let Some(rx) = resolution {
                            let (seen, state) = {
                                let state = rx.borrow();
                                (self.resolution.published().get(), state.clone())
                            };
                            self.on_resolution(state, seen);
                        }
                    }
                }
                // Woken with no call in flight (`connect()`, or a call still resolving): the idle timeout runs
                // from now, so a channel that is never used goes IDLE again. Calls disarm nothing: when the
                // timer fires it checks for calls in flight and when the last one ended, and re-arms itself.
                self.arm_idle_timer();
                if let Some(p) = self.activity.policy() {
                    p.exit_idle(now);
                }
            }
            Event::Shutdown => {}
        }
    }

    /// Starts the idle timeout (a timeout too large to add to now means never). When it fires, the channel
    /// goes IDLE if no call is in flight and none ended within the timeout; otherwise it is re-armed.
    fn arm_idle_timer(&mut self) {
        self.activity.arm_idle_timer(self.idle_timeout);
    }

    fn is_current(&self, id: SubchannelId, generation: u64) -> bool {
        self.tasks.get(&id).is_some_and(|(g, _)| *g == generation)
    }

    /// Applies a resolution state, read after the resolver's count said `seen`: every picker published
    /// from here on says so, and one is published at the end even if the policy's did not change (a call
    /// that started after the resolver published waits for that).
    fn on_resolution(&mut self, state: State, seen: u64) {
        if self.activity.is_idle() {
            return;
        }
        self.resolutions = self.resolutions.max(seen);
        self.on_resolution_state(state);
        self.drain_actions();
        if !self.activity.is_idle() && self.published.borrow().resolutions < self.resolutions {
            let (state, spec) = self.spec.clone();
            self.publish(state, spec);
        }
    }

    fn on_resolution_state(&mut self, state: State) {
        self.activity.resolved();
        let now = self.now();
        match state {
            State::Pending => {}
            State::Failed(status) => {
                if self.routed {
                    // A routing resolver that fails (A27: its listener or routes are gone) fails the
                    // channel: its policy goes, and the next routing starts a new one.
                    // Calls already on a READY connection finish there (A28: a committed call keeps its
                    // cluster's connection); connecting attempts stop.
                    self.routed = false;
                    self.release_connections();
                    if let Some(a) = self.activity.active() {
                        a.policy = None;
                    }
                    self.fail_all(status.message());
                } else if self.addresses.is_empty() {
                    self.fail_all(status.message());
                } else if let Some(p) = self.activity.policy() {
                    p.resolver_error(status.message(), now);
                }
            }
            State::Ready {
                endpoints,
                config,
                routing,
            } => {
                // A resolver that routes calls to clusters (xDS) picks through the cluster manager; its
                // clusters' endpoints replace the address list.
                let (wanted, outlier) = policy_choice(&config, routing.as_deref(), &self.policies);
                let health_service = self.health.wanted(config.health_check_service_name());
                let mut restart_watches = self.health.set_service(health_service.clone());
                // The running policy stays if the choice names it (and it did not panic): it gets the
                // new config with the endpoints.
                let keep = self
                    .activity
                    .active()
                    .and_then(|a| a.policy.as_ref())
                    .is_some_and(|p| p.lb.name() == wanted.name() && p.lb.panicked().is_none());
                if !keep {
                    restart_watches = true;
                    // A graceful switch: while the new policy connects, the old one's READY connections keep
                    // serving (its last picker), and they close once the new policy is READY.
                    self.retire_policy();
                    // connect_timeout is the connection-backoff spec's MIN_CONNECT_TIMEOUT: every attempt
                    // gets at least that long.
                    let backoff = BackoffConfig {
                        min_connect_timeout: self.settings.connect_timeout,
                        ..BackoffConfig::default()
                    };
                    let options = BuildOptions::new(Box::new(SplitMix64::new(self.rng.next())))
                        .with_backoff(backoff);
                    let mut lb =
                        LbPolicy::build(wanted.builder.as_ref(), wanted.config.clone(), options);
                    if let Some(a) = self.activity.active() {
                        // The new policy starts with the ejections in force.
                        for (scope, d) in a.outlier.iter().flat_map(OutlierDetectors::scopes) {
                            for address in d.ejected() {
                                Loop::set_ejected(&mut lb, scope, address, true, now);
                            }
                        }
                        a.policy = Some(Policy { lb });
                    }
                }
                if let Some(p) = self.activity.policy() {
                    p.set_health_checking(health_service.is_some(), now);
                }
                // The policy takes addresses: each endpoint's, in order.
                self.addresses = endpoints
                    .iter()
                    .flat_map(|e| e.addresses().iter().cloned())
                    .collect();
                self.health.retain_addresses(&self.addresses);
                let scopes = self.outlier_scopes(routing.as_deref(), outlier);
                self.update_outlier(scopes, now);
                self.apply_outlier_events(now);
                self.routed = routing.is_some();
                if let Some(p) = self.activity.policy() {
                    // The resolver's endpoints, attributes and all (the xDS cluster manager's come
                    // with its config).
                    let endpoints: &[Endpoint] = match &routing {
                        Some(_) => &[],
                        None => &endpoints,
                    };
                    p.update(endpoints, wanted.config, now);
                }
                // Whether the policy runs health checks is judged by the config it now applies (a policy
                // of the application's may run them or not by its config).
                if let Some(p) = self.activity.policy() {
                    p.set_health_checking(health_service.is_some(), now);
                    self.stats
                        .addresses
                        .set_health_checking(p.health_checking());
                    let (name, uses_health) = (p.name().to_owned(), p.uses_health());
                    self.notes.applied(
                        &config,
                        health_service.as_deref(),
                        &name,
                        uses_health,
                        routing.is_some(),
                    );
                }
                if restart_watches {
                    self.restart_health_watches();
                }
                self.sync_results();
                if let Some(r) = &routing {
                    // Calls routed by this routing pick once a picker says it is applied: publish one
                    // even if the policy's picker did not change.
                    self.routing_generation = r.generation;
                    self.drain_actions();
                    if !self.activity.is_idle() {
                        let (state, spec) = self.spec.clone();
                        self.publish(state, spec);
                    }
                }
            }
        }
    }

    /// Stops every health watch and starts one on each READY connection if the policy health checks.
    fn restart_health_watches(&mut self) {
        self.health.stop_all();
        let now = self.now();
        let Some(p) = self.activity.policy() else {
            return;
        };
        // Answers about another service, or from before checking stopped, say nothing now (A17: a Watch
        // starts CONNECTING).
        for (addr, _) in self.conns.values() {
            p.set_health(addr, Health::Unknown, now);
            self.stats.addresses.set_health(addr, Health::Unknown);
        }
        let p = &*p;
        for (id, (addr, conn)) in &self.conns {
            let seed = self.rng.next();
            self.health.start(p, *id, addr, conn, &self.events_tx, seed);
        }
    }

    /// What is due at the timer: going IDLE, the policy's timers, the outlier detector's sweep. An IDLE
    /// channel has no timer.
    fn on_timer(&mut self) {
        let now = Instant::now();
        if self.activity.idle_due(now, &self.calls, self.idle_timeout) {
            self.enter_idle();
            return;
        }
        if let Some(p) = self.activity.policy() {
            p.handle_timeout(now.into_std());
        }
        self.sweep(now.into_std());
    }

    /// Goes IDLE: the connections, the policy and the outlier detector go.
    fn enter_idle(&mut self) {
        tracing::debug!("no calls for the idle timeout: the channel goes IDLE");
        self.drop_connections();
        self.activity.enter_idle();
        // The counters stay (the per-address stats go on counting); outlier detection starts afresh.
        self.outlier_counting = false;
        self.subchannel_addresses.clear();
        self.stats.addresses.all_idle();
        self.stats.ejections.clear();
        self.ejected_since.clear();
        self.publish(ConnectivityState::Idle, PickerSpec::Idle);
    }

    fn fail_all(&mut self, message: &str) {
        self.publish(
            ConnectivityState::TransientFailure,
            PickerSpec::Fail(message.to_owned()),
        );
    }

    fn shutdown(&mut self) {
        self.drop_connections();
        // Nothing is ejected from a channel that is shut down.
        if let Some(a) = self.activity.active() {
            a.policy = None;
            a.outlier = None;
        }
        self.outlier_counting = false;
        self.subchannel_addresses.clear();
        self.stats.addresses.all_idle();
        self.stats.ejections.clear();
        self.ejected_since.clear();
        self.publish(
            ConnectivityState::Shutdown,
            PickerSpec::Fail("the channel is shut down".to_owned()),
        );
    }

    fn publish(&mut self, state: ConnectivityState, spec: PickerSpec) {
        // A connection error is quoted only to calls that waited through it (grpc-go quotes the error of
        // the picker a call saw): once the channel is READY or IDLE again, the last one is history.
        if matches!(state, ConnectivityState::Ready | ConnectivityState::Idle) {
            self.last_failure = None;
            self.last_failure_address = None;
        }
        // While the new policy is CONNECTING, a retired READY policy keeps serving; anything else the new
        // one says (READY, or TRANSIENT_FAILURE: every backend failed or is not serving) ends the switch,
        // as grpc-go's graceful switch does.
        if state != ConnectivityState::Connecting {
            self.drop_retired(false);
        } else if let Some(retired) = &self.retired {
            let picker = retired.picker(self.rng.next() as usize, &self.results);
            self.spec = (state, spec);
            let _ = self.published.send(Arc::new(Published {
                state: ConnectivityState::Ready,
                picker,
                routing_generation: self.routing_generation,
                resolutions: self.resolutions,
                last_failure: self.last_failure.clone(),
                last_failure_address: self.last_failure_address.clone(),
            }));
            return;
        }
        let start = self.rng.next() as usize;
        let conns = &self.conns;
        let results = &self.results;
        let cluster_results = &self.cluster_results;
        // Each handle carries its connection's address's counter (per-address stats, outlier detection),
        // whatever the spec: a policy's list, its own picker, or the xDS cluster manager's clusters; in
        // a cluster with outlier detection, the address's counter in that cluster.
        let handle = |id, cluster: Option<&str>| {
            conns.get(&id).map(|(addr, conn)| Handle {
                conn: conn.send.clone(),
                results: cluster
                    .and_then(|c| cluster_results.get(c))
                    .and_then(|m| m.get(addr))
                    .or_else(|| results.get(addr))
                    .cloned(),
            })
        };
        let picker = Picker::with_cluster_handles(&spec, handle, start);
        self.spec = (state, spec);
        let _ = self.published.send(Arc::new(Published {
            state,
            picker,
            routing_generation: self.routing_generation,
            resolutions: self.resolutions,
            last_failure: self.last_failure.clone(),
            last_failure_address: self.last_failure_address.clone(),
        }));
    }

    fn drain_actions(&mut self) {
        // Only the last picker of a batch is published: the ones before it were never current.
        let mut picker = None;
        while let Some(action) = self.activity.policy().and_then(LbPolicy::poll_action) {
            match action {
                LbAction::Connect {
                    id,
                    addr,
                    transport,
                    deadline,
                } => {
                    self.stats
                        .addresses
                        .set_state(&addr, id, ConnectivityState::Connecting);
                    self.subchannel_addresses.insert(id, addr.clone());
                    self.generation += 1;
                    let generation = self.generation;
                    let channel = ChannelParts {
                        settings: self.settings.clone(),
                        // The channel's own TLS (or plaintext), or the transport the key names (A29):
                        // a key without a usable transport fails the attempt, never falling back.
                        tls: match &transport {
                            None => Ok(self.tls.clone()),
                            Some(key) => {
                                self.resolution.transports().connector(key, &addr).map(Some)
                            }
                        },
                        route: self.route.clone(),
                        keepalive: self.keepalive.clone(),
                        active: self.calls.clone(),
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
                    if let Some(addr) = self.subchannel_addresses.remove(&id) {
                        self.stats.addresses.disconnected(&addr, id);
                    }
                    if let Some((_, task)) = self.tasks.remove(&id) {
                        // A READY connection finishes the calls it carries (h2 closes it once its handles
                        // are gone and its last stream ended: an endpoint update never cuts a call); an
                        // attempt still connecting stops now.
                        if self.conns.contains_key(&id) {
                            if self.detached.len() == self.detached.capacity() {
                                self.detached.retain(|t| !t.is_finished());
                                // Room for as many again: the next pruning is that many away.
                                self.detached.reserve(self.detached.len());
                            }
                            self.detached.push(task);
                        } else {
                            task.abort();
                        }
                    }
                    self.health.stop(id);
                    self.conns.remove(&id);
                }
                LbAction::ResolveNow => self.resolution.resolve_now(),
                LbAction::UpdatePicker {
                    state,
                    picker: spec,
                } => picker = Some((state, spec)),
                // An action this channel does not know yet.
                _ => {}
            }
        }
        if let Some((state, spec)) = picker {
            if !self.activity.is_idle() {
                self.publish(state, spec);
            }
        }
        // A policy that panicked is gone (its failing picker is published): its connections go too,
        // finishing the calls they carry, and the loop lets go of it. Recovery: ask the resolver to
        // resolve again (within its rate limit; a resolver that only answers when asked, such as DNS,
        // would otherwise leave the channel failing for good); the resolution that answers, even one
        // identical to the last, builds a new policy, since there is none to keep.
        let panicked = self
            .activity
            .policy()
            .and_then(|p| p.panicked().map(str::to_owned));
        if let Some(message) = panicked {
            tracing::error!(%message, "the load-balancing policy panicked: its connections close, and the resolver is asked to resolve again");
            self.release_connections();
            if let Some(a) = self.activity.active() {
                a.policy = None;
            }
            self.resolution.resolve_now();
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
