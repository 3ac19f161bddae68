//! A load-balancing policy of one's own, written against the public API only (`grpc_channel::lb`): "fewest
//! calls in flight" picks the READY backend with the fewest calls in flight, counted by the guards its
//! picker hands out (each call keeps one until it ends). A service config's `loadBalancingConfig` selects
//! it by name; it is registered for this channel with `ChannelBuilder::lb_policy`
//! (`grpc_channel::lb::register_policy` would register it for the whole process).
//!
//! Give it two or more backends: `--target=ipv4:127.0.0.1:P1,127.0.0.1:P2`. It makes slow calls pile up on
//! one backend and checks that new calls went elsewhere; it fails (non-zero exit) if the policy was not the
//! one that picked.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use grpc_channel::lb::{
    Address, BuildOptions, ConnectivityState, CustomPick, CustomPicker, InFlightCounter,
    LbConfigError, LoadBalancer, LoadBalancerBuilder, ParsedLbConfig, PickGuard, PickRequest,
    PickerSpec, PolicyUpdate, SubchannelId, SubchannelPicker, Subchannels, TimerEvent,
};
use grpc_channel::Channel;
use interop_proto::test_service_client::TestServiceClient;
use interop_proto::{ResponseParameters, SimpleRequest, StreamingOutputCallRequest};

const NAME: &str = "least_in_flight_example";

const CONFIG: &str = r#"{
  "loadBalancingConfig": [{"no_such_policy": {}}, {"least_in_flight_example": {}}, {"round_robin": {}}]
}"#;

/// What the policy saw, for the example to print and check.
#[derive(Default)]
struct Observed {
    /// Picks the policy's picker answered.
    picks: AtomicU64,
    /// The most calls in flight the chosen backend had when picked.
    max_in_flight_at_pick: AtomicU64,
    /// Endpoint updates the policy received.
    updates: AtomicU64,
    /// Picks per backend address.
    by_address: Mutex<BTreeMap<String, u64>>,
}

/// Builds the policy; every policy it builds writes into the same [`Observed`].
struct LeastInFlightBuilder {
    observed: Arc<Observed>,
}

impl LoadBalancerBuilder for LeastInFlightBuilder {
    fn name(&self) -> &str {
        NAME
    }

    fn parse_config(&self, config: &serde_json::Value) -> Result<ParsedLbConfig, LbConfigError> {
        match config.as_object() {
            Some(fields) if fields.is_empty() => Ok(ParsedLbConfig::empty()),
            _ => Err(LbConfigError::invalid(NAME, "takes no fields")),
        }
    }

    fn build(&self, options: BuildOptions) -> Box<dyn LoadBalancer> {
        Box::new(LeastInFlight {
            subs: options.into_subchannels(),
            order: Vec::new(),
            counters: HashMap::new(),
            state: ConnectivityState::Idle,
            observed: self.observed.clone(),
        })
    }
}

/// The policy: one subchannel per address, every one kept connected; each has a count of its calls in
/// flight that outlives pickers.
struct LeastInFlight {
    subs: Subchannels,
    order: Vec<SubchannelId>,
    counters: HashMap<SubchannelId, InFlightCounter>,
    state: ConnectivityState,
    observed: Arc<Observed>,
}

impl LeastInFlight {
    fn connect_idle(&mut self, now: Instant) {
        for id in &self.order {
            self.subs.connect(*id, now);
        }
    }

    /// Publishes a picker for the subchannels' states now.
    fn publish(&mut self) {
        let ready: Vec<(SubchannelId, Address)> = self
            .order
            .iter()
            .filter(|id| self.subs.state(**id) == ConnectivityState::Ready)
            .filter_map(|id| self.subs.get(*id).map(|s| (*id, s.address().clone())))
            .collect();
        let (state, picker) = if !ready.is_empty() {
            let backends = ready
                .iter()
                .map(|(id, addr)| {
                    let counter = self.counters.entry(*id).or_default().clone();
                    (*id, addr.to_string(), counter)
                })
                .collect();
            let picker = FewestInFlight {
                backends,
                next: AtomicUsize::new(0),
                observed: self.observed.clone(),
            };
            (
                ConnectivityState::Ready,
                PickerSpec::Custom(CustomPicker::new(ready, Arc::new(picker))),
            )
        } else {
            let states = self.order.iter().map(|id| self.subs.state(*id));
            match ConnectivityState::aggregate(states) {
                ConnectivityState::Idle => (ConnectivityState::Idle, PickerSpec::Idle),
                ConnectivityState::Connecting => (ConnectivityState::Connecting, PickerSpec::Queue),
                _ => (
                    ConnectivityState::TransientFailure,
                    PickerSpec::Fail(format!(
                        "{NAME}: no backend is reachable; last error: {}",
                        self.subs.last_error().unwrap_or("none")
                    )),
                ),
            }
        };
        if state != self.state || state == ConnectivityState::Ready || self.order.is_empty() {
            self.state = state;
            self.subs.publish(state, picker);
        }
    }
}

impl LoadBalancer for LeastInFlight {
    fn update(&mut self, update: PolicyUpdate<'_>, now: Instant) {
        self.observed.updates.fetch_add(1, Ordering::Relaxed);
        self.order = self.subs.sync(&update.addresses());
        let kept: BTreeSet<SubchannelId> = self.order.iter().copied().collect();
        self.counters.retain(|id, _| kept.contains(id));
        self.connect_idle(now);
        self.publish();
    }

    fn exit_idle(&mut self, now: Instant) {
        self.connect_idle(now);
        self.publish();
    }

    fn subchannel_ready(&mut self, id: SubchannelId, _now: Instant) {
        if self.subs.ready(id) {
            self.publish();
        }
    }

    fn subchannel_failed(&mut self, id: SubchannelId, error: String, now: Instant) {
        if self.subs.failed(id, error, now) {
            self.subs.resolve_now();
            self.publish();
        }
    }

    fn subchannel_closed(&mut self, id: SubchannelId, now: Instant) {
        if self.subs.closed(id) {
            self.subs.resolve_now();
            self.subs.connect(id, now);
            self.publish();
        }
    }

    fn ejection_changed(&mut self, _addr: &Address, _now: Instant) {
        self.publish();
    }

    fn handle_timeout(&mut self, now: Instant) {
        for event in self.subs.handle_timeout(now) {
            match event {
                TimerEvent::BackoffOver(id) => {
                    self.subs.connect(id, now);
                }
                TimerEvent::ConnectTimedOut(_) => self.subs.resolve_now(),
                // `TimerEvent` may grow (it is `#[non_exhaustive]`).
                _ => {}
            }
        }
        self.publish();
    }

    fn state(&self) -> ConnectivityState {
        self.state
    }

    fn subchannels(&self) -> &Subchannels {
        &self.subs
    }

    fn subchannels_mut(&mut self) -> &mut Subchannels {
        &mut self.subs
    }
}

/// The picker: the backend with the fewest calls in flight (ties go round the list).
struct FewestInFlight {
    backends: Vec<(SubchannelId, String, InFlightCounter)>,
    next: AtomicUsize,
    observed: Arc<Observed>,
}

impl SubchannelPicker for FewestInFlight {
    fn pick(&self, _request: &PickRequest<'_>) -> CustomPick {
        let n = self.backends.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let chosen = (0..n)
            .map(|i| &self.backends[(start + i) % n])
            .min_by_key(|(_, _, counter)| counter.in_flight());
        let Some((id, addr, counter)) = chosen else {
            return CustomPick::Queue { exit_idle: false };
        };
        self.observed.picks.fetch_add(1, Ordering::Relaxed);
        self.observed
            .max_in_flight_at_pick
            .fetch_max(counter.in_flight(), Ordering::Relaxed);
        if let Ok(mut by_address) = self.observed.by_address.lock() {
            *by_address.entry(addr.clone()).or_default() += 1;
        }
        // The call keeps the claim until it ends: that is the count the next picks compare.
        CustomPick::subchannel_with_guard(*id, PickGuard::from(counter.claim()))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let observed = Arc::new(Observed::default());
    let channel = Channel::builder(grpc_examples::target())
        .lb_policy(LeastInFlightBuilder {
            observed: observed.clone(),
        })
        .default_service_config(CONFIG)
        .build()?;
    let mut client = TestServiceClient::new(channel.clone());
    // Warm up: both backends connect, and calls that end at once spread over them.
    let mut servers = BTreeSet::new();
    for _ in 0..6 {
        let response = client
            .unary_call(SimpleRequest {
                fill_server_id: true,
                ..Default::default()
            })
            .await?;
        servers.insert(response.into_inner().server_id);
    }
    // Slow calls (the server answers after 400 ms), made at the same time: each is picked (one at a time,
    // on this single-threaded runtime) for the backend with the fewest calls in flight, so they spread.
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut client = client.clone();
        slow.push(tokio::spawn(async move {
            let request = StreamingOutputCallRequest {
                response_parameters: vec![ResponseParameters {
                    size: 8,
                    interval_us: 400_000,
                    ..Default::default()
                }],
                ..Default::default()
            };
            let mut stream = client.streaming_output_call(request).await?.into_inner();
            while stream.message().await?.is_some() {}
            Ok::<(), grpc_channel::Status>(())
        }));
    }
    for task in slow {
        task.await??;
    }
    let in_flight_seen = observed.max_in_flight_at_pick.load(Ordering::Relaxed);
    let picks = observed.picks.load(Ordering::Relaxed);
    let by_address = observed
        .by_address
        .lock()
        .map(|m| m.clone())
        .unwrap_or_default();
    println!(
        "{NAME}: {} endpoint update(s), {picks} picks, per backend {by_address:?}; servers {servers:?}; \
         the busiest backend had {in_flight_seen} call(s) in flight when picked",
        observed.updates.load(Ordering::Relaxed),
    );
    if picks < 10 {
        return Err(
            format!("{NAME} picked {picks} calls of 10: it was not the policy in use").into(),
        );
    }
    if by_address.len() < 2 {
        return Err(format!(
            "{NAME} used {} backend(s); give it two or more",
            by_address.len()
        )
        .into());
    }
    // Four slow calls over two or more backends, each sent to the least busy one: the later ones were
    // picked while the guards of the earlier ones counted them.
    if in_flight_seen == 0 {
        return Err(format!(
            "the slow calls were not spread by calls in flight (the chosen backend had {in_flight_seen})"
        )
        .into());
    }
    Ok(())
}
