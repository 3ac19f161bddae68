//! Tests of the public policy API: the registry (per channel, process-wide, built-in), the built-ins'
//! builders, a user's policy with its own picker driven directly (sans-IO, deterministic) through
//! [`LbPolicy`], its pick guards, and what a panicking policy or picker turns into.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use grpc_base::{Address, Endpoint, SplitMix64};

use crate::{
    builtin_policy, register_policy, BuildOptions, ConnectivityState, CustomPick, CustomPicker,
    InFlightCounter, LbAction, LbConfigError, LbPolicy, LoadBalancer, LoadBalancerBuilder,
    ParsedLbConfig, PickFirstConfig, PickGuard, PickRequest, PickResult, Picker, PickerSpec,
    PolicyRegistry, PolicyUpdate, SubchannelId, SubchannelPicker, Subchannels, TimerEvent,
};

fn addr(n: u8) -> Address {
    Address::Tcp(SocketAddr::from(([10, 0, 0, n], 443)))
}

/// A user's policy: fewest calls in flight over the READY subchannels, with a knob that makes it panic.
struct Fewest {
    subs: Subchannels,
    order: Vec<SubchannelId>,
    counters: HashMap<SubchannelId, InFlightCounter>,
    state: ConnectivityState,
    panic_on_ready: bool,
}

#[derive(Debug)]
struct FewestConfig {
    panic_on_ready: bool,
}

struct FewestBuilder(&'static str);

impl LoadBalancerBuilder for FewestBuilder {
    fn name(&self) -> &str {
        self.0
    }

    fn parse_config(&self, config: &serde_json::Value) -> Result<ParsedLbConfig, LbConfigError> {
        let obj = config
            .as_object()
            .ok_or_else(|| LbConfigError::invalid(self.0, "not an object"))?;
        let panic_on_ready = match obj.get("panicOnReady") {
            None => false,
            Some(v) => v
                .as_bool()
                .ok_or_else(|| LbConfigError::invalid(self.0, "panicOnReady is not a boolean"))?,
        };
        Ok(ParsedLbConfig::new(FewestConfig { panic_on_ready }))
    }

    fn build(&self, options: BuildOptions) -> Box<dyn LoadBalancer> {
        Box::new(Fewest {
            subs: options.into_subchannels(),
            order: Vec::new(),
            counters: HashMap::new(),
            state: ConnectivityState::Idle,
            panic_on_ready: false,
        })
    }
}

struct FewestPicker(Vec<(SubchannelId, InFlightCounter)>);

impl SubchannelPicker for FewestPicker {
    fn pick(&self, request: &PickRequest<'_>) -> CustomPick {
        if request.method == "/panic" {
            panic!("picker boom");
        }
        match self.0.iter().min_by_key(|(_, c)| c.in_flight()) {
            Some((id, c)) => CustomPick::subchannel_with_guard(*id, PickGuard::from(c.claim())),
            None => CustomPick::Queue { exit_idle: false },
        }
    }
}

impl Fewest {
    fn publish(&mut self) {
        let ready: Vec<(SubchannelId, Address)> = self
            .order
            .iter()
            .filter(|id| self.subs.state(**id) == ConnectivityState::Ready)
            .filter_map(|id| self.subs.get(*id).map(|s| (*id, s.address().clone())))
            .collect();
        if ready.is_empty() {
            self.state = ConnectivityState::Connecting;
            self.subs.publish(self.state, PickerSpec::Queue);
            return;
        }
        let counters = ready
            .iter()
            .map(|(id, _)| (*id, self.counters.entry(*id).or_default().clone()))
            .collect();
        self.state = ConnectivityState::Ready;
        self.subs.publish(
            self.state,
            PickerSpec::Custom(CustomPicker::new(ready, Arc::new(FewestPicker(counters)))),
        );
    }
}

impl LoadBalancer for Fewest {
    fn update(&mut self, update: PolicyUpdate<'_>, now: Instant) {
        if let Some(c) = update.config.downcast_ref::<FewestConfig>() {
            self.panic_on_ready = c.panic_on_ready;
        }
        self.order = self.subs.sync(&update.addresses());
        for id in self.order.clone() {
            self.subs.connect(id, now);
        }
        self.publish();
    }

    fn exit_idle(&mut self, _now: Instant) {}

    fn subchannel_ready(&mut self, id: SubchannelId, _now: Instant) {
        assert!(!self.panic_on_ready, "policy boom");
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
            self.subs.connect(id, now);
            self.publish();
        }
    }

    fn ejection_changed(&mut self, _addr: &Address, _now: Instant) {
        self.publish();
    }

    fn handle_timeout(&mut self, now: Instant) {
        for event in self.subs.handle_timeout(now) {
            if let TimerEvent::BackoffOver(id) = event {
                self.subs.connect(id, now);
            }
        }
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

fn build(name: &'static str, json: &str) -> LbPolicy {
    let builder = FewestBuilder(name);
    let config = builder
        .parse_config(&serde_json::from_str(json).expect("json"))
        .expect("a valid config");
    LbPolicy::build(
        &builder,
        config,
        BuildOptions::new(Box::new(SplitMix64::new(3))),
    )
}

fn drain(lb: &mut LbPolicy) -> Vec<LbAction> {
    std::iter::from_fn(|| lb.poll_action()).collect()
}

fn last_picker(actions: &[LbAction]) -> Option<(ConnectivityState, PickerSpec)> {
    actions.iter().rev().find_map(|a| match a {
        LbAction::UpdatePicker { state, picker } => Some((*state, picker.clone())),
        _ => None,
    })
}

fn pick(p: &Picker<u64>, method: &str) -> PickResult<u64> {
    p.pick(&PickRequest {
        method,
        ..PickRequest::default()
    })
}

#[test]
fn the_registry_prefers_the_channel_then_the_process_then_the_built_ins() {
    assert_eq!(
        builtin_policy("round_robin").map(|b| b.name().to_owned()),
        Some("round_robin".to_owned())
    );
    assert!(builtin_policy("api_tests_unknown").is_none());
    let empty = PolicyRegistry::new();
    assert!(empty.get("api_tests_unknown").is_none());
    assert!(empty.registered("round_robin").is_none());
    assert!(empty.get("pick_first").is_some());

    register_policy(FewestBuilder("api_tests_global"));
    assert!(empty.registered("api_tests_global").is_some());
    // A channel's own builder of the same name wins over the process-wide one.
    let own: Arc<dyn LoadBalancerBuilder> = Arc::new(FewestBuilder("api_tests_global"));
    let mut local = PolicyRegistry::new();
    local.register(own.clone());
    let found = local.get("api_tests_global").expect("registered");
    assert!(Arc::ptr_eq(&found, &own));
    assert_eq!(local.names().collect::<Vec<_>>(), ["api_tests_global"]);
    // ... and over a built-in.
    let rr = PolicyRegistry::new().with(FewestBuilder("round_robin"));
    assert!(rr.registered("round_robin").is_some());
    let mut merged = PolicyRegistry::new();
    merged.extend(&rr);
    assert_eq!(merged, rr);
    assert_ne!(merged, PolicyRegistry::new());
}

#[test]
fn built_in_builders_parse_their_configs() {
    let pf = builtin_policy("pick_first").expect("built in");
    let parsed = pf
        .parse_config(&serde_json::json!({"shuffleAddressList": true}))
        .expect("valid");
    assert_eq!(
        parsed.downcast_ref::<PickFirstConfig>(),
        Some(&PickFirstConfig::new(true))
    );
    assert!(pf
        .parse_config(&serde_json::json!({"shuffleAddressList": 1}))
        .is_err());
    let rr = builtin_policy("round_robin").expect("built in");
    assert!(rr.parse_config(&serde_json::json!({})).is_ok());
    assert!(rr.parse_config(&serde_json::json!([])).is_err());
    let xds = builtin_policy("xds_cluster_manager_experimental").expect("built in");
    assert!(xds.parse_config(&serde_json::json!({})).is_err());
}

#[test]
fn a_custom_policy_connects_publishes_its_picker_and_counts_calls_in_flight() {
    let now = Instant::now();
    let mut lb = build("api_tests_fewest", "{}");
    let endpoints = [
        Endpoint::new(addr(1)),
        Endpoint::new(addr(2)).with_address(addr(3)),
    ];
    let config = FewestBuilder("x")
        .parse_config(&serde_json::json!({}))
        .expect("valid");
    lb.update(&endpoints, config, now);
    let actions = drain(&mut lb);
    let connects: Vec<(SubchannelId, Address)> = actions
        .iter()
        .filter_map(|a| match a {
            LbAction::Connect { id, addr, .. } => Some((*id, addr.clone())),
            _ => None,
        })
        .collect();
    // One subchannel per address of every endpoint.
    assert_eq!(
        connects.iter().map(|(_, a)| a.clone()).collect::<Vec<_>>(),
        [addr(1), addr(2), addr(3)]
    );
    assert_eq!(
        last_picker(&actions).map(|p| p.0),
        Some(ConnectivityState::Connecting)
    );
    for (id, _) in &connects[..2] {
        lb.subchannel_ready(*id, now);
    }
    lb.subchannel_failed(connects[2].0, "refused".into(), now);
    let actions = drain(&mut lb);
    assert!(actions.contains(&LbAction::ResolveNow));
    let (state, spec) = last_picker(&actions).expect("a picker");
    assert_eq!(state, ConnectivityState::Ready);
    let PickerSpec::Custom(custom) = &spec else {
        panic!("{spec:?}")
    };
    assert_eq!(custom.subchannels().len(), 2);
    let picker: Picker<u64> = Picker::new(&spec, |id| Some(id.0 * 10), 0);
    let mut ready = picker.ready_addresses();
    ready.sort_by_key(|a| a.to_string());
    assert_eq!(ready, [addr(1), addr(2)]);
    // Each pick goes to the subchannel with the fewest calls in flight: the guards count them.
    let mut guards = Vec::new();
    let mut handles = Vec::new();
    for _ in 0..4 {
        match pick(&picker, "/a.B/C") {
            PickResult::Pick {
                handle,
                guard: Some(guard),
                ..
            } => {
                handles.push(handle);
                guards.push(guard);
            }
            other => panic!("{other:?}"),
        }
    }
    handles.sort_unstable();
    assert_eq!(handles, [0, 0, 10, 10]);
    // Every call ends: the counts are back to 0, and the next two picks spread again.
    assert!(guards.iter().all(|g| g.claim().is_some()));
    guards.clear();
    let next: Vec<PickResult<u64>> = (0..2).map(|_| pick(&picker, "/a.B/C")).collect();
    let mut handles: Vec<u64> = next
        .iter()
        .map(|r| match r {
            PickResult::Pick { handle, .. } => *handle,
            other => panic!("{other:?}"),
        })
        .collect();
    handles.sort_unstable();
    assert_eq!(handles, [0, 10]);
    drop(next);
    // An ejected subchannel leaves the picker (the overlay applies to any policy).
    lb.eject(&addr(1), now);
    assert!(lb.is_ejected(&addr(1)));
    let (_, spec) = last_picker(&drain(&mut lb)).expect("a picker");
    let picker: Picker<u64> = Picker::new(&spec, |id| Some(id.0 * 10), 0);
    assert_eq!(picker.ready_addresses(), [addr(2)]);
    // The backoff timer of the failed subchannel reconnects it.
    let later = now + Duration::from_secs(5);
    assert!(lb.poll_timeout().is_some_and(|t| t <= later));
    lb.handle_timeout(later);
    assert!(drain(&mut lb)
        .iter()
        .any(|a| matches!(a, LbAction::Connect { id, .. } if *id == connects[2].0)));
}

#[test]
fn a_panicking_policy_fails_the_channel_cleanly_and_stays_failed() {
    let now = Instant::now();
    let mut lb = build("api_tests_panics", r#"{"panicOnReady": true}"#);
    let config = FewestBuilder("x")
        .parse_config(&serde_json::json!({"panicOnReady": true}))
        .expect("valid");
    lb.update(&[Endpoint::new(addr(1))], config, now);
    let id = drain(&mut lb)
        .iter()
        .find_map(|a| match a {
            LbAction::Connect { id, .. } => Some(*id),
            _ => None,
        })
        .expect("a connect");
    assert!(lb.panicked().is_none());
    lb.subchannel_ready(id, now);
    let message = lb.panicked().expect("panicked").to_owned();
    assert!(
        message.contains("load-balancing policy \"api_tests_panics\" panicked: policy boom"),
        "{message}"
    );
    assert_eq!(
        drain(&mut lb),
        [LbAction::UpdatePicker {
            state: ConnectivityState::TransientFailure,
            picker: PickerSpec::Fail(message.clone()),
        }]
    );
    // Whatever comes next does nothing, and panics no more.
    lb.subchannel_closed(id, now);
    lb.exit_idle(now);
    lb.handle_timeout(now);
    assert_eq!(lb.state(), ConnectivityState::TransientFailure);
    assert_eq!(lb.poll_action(), None);
    assert!(lb.subchannels().is_empty());
}

#[test]
fn a_panicking_builder_or_picker_is_an_error_not_a_crash() {
    struct Bad;
    impl LoadBalancerBuilder for Bad {
        fn name(&self) -> &str {
            "api_tests_bad"
        }
        fn parse_config(&self, _: &serde_json::Value) -> Result<ParsedLbConfig, LbConfigError> {
            Ok(ParsedLbConfig::empty())
        }
        fn build(&self, _: BuildOptions) -> Box<dyn LoadBalancer> {
            panic!("cannot build")
        }
    }
    let mut lb = LbPolicy::build(
        &Bad,
        ParsedLbConfig::empty(),
        BuildOptions::new(Box::new(SplitMix64::new(1))),
    );
    assert!(lb.panicked().is_some_and(|m| m.contains("cannot build")));
    assert!(matches!(
        lb.poll_action(),
        Some(LbAction::UpdatePicker {
            state: ConnectivityState::TransientFailure,
            ..
        })
    ));
    // A picker that panics drops the call with an error naming the panic.
    let spec = PickerSpec::Custom(CustomPicker::new(
        vec![(SubchannelId(1), addr(1))],
        Arc::new(FewestPicker(vec![(
            SubchannelId(1),
            InFlightCounter::default(),
        )])),
    ));
    let picker: Picker<u64> = Picker::new(&spec, |id| Some(id.0), 0);
    match pick(&picker, "/panic") {
        PickResult::Drop(m) => assert!(
            m.contains("load-balancing policy picker panicked: picker boom"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    // A pick of a subchannel the picker was not given queues.
    let stray = PickerSpec::Custom(CustomPicker::new(
        vec![],
        Arc::new(FewestPicker(vec![(
            SubchannelId(9),
            InFlightCounter::default(),
        )])),
    ));
    let picker: Picker<u64> = Picker::new(&stray, |id| Some(id.0), 0);
    assert_eq!(
        pick(&picker, "/a.B/C"),
        PickResult::Queue { exit_idle: false }
    );
}

#[test]
fn a_custom_guard_is_dropped_with_the_call() {
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicBool::new(false));
    let guard = PickGuard::new(Flag(dropped.clone()));
    let copy = guard.clone();
    assert_eq!(guard, copy);
    assert!(guard.claim().is_none());
    drop(guard);
    assert!(!dropped.load(Ordering::SeqCst));
    drop(copy);
    assert!(dropped.load(Ordering::SeqCst));
}

/// The application's `Drop`s (a policy's, a picker's, a pick guard's) may panic: each is caught where the
/// channel drops it, never unwinding into the channel or a call.
#[test]
fn panics_in_the_applications_drops_are_caught() {
    struct Boom;
    impl Drop for Boom {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                panic!("drop boom");
            }
        }
    }
    struct BoomPicker(#[allow(dead_code)] Boom);
    impl SubchannelPicker for BoomPicker {
        fn pick(&self, _: &PickRequest<'_>) -> CustomPick {
            CustomPick::Queue { exit_idle: false }
        }
    }
    struct BoomPolicy(Subchannels, #[allow(dead_code)] Boom);
    impl LoadBalancer for BoomPolicy {
        fn update(&mut self, _: PolicyUpdate<'_>, _: Instant) {}
        fn exit_idle(&mut self, _: Instant) {}
        fn subchannel_ready(&mut self, _: SubchannelId, _: Instant) {}
        fn subchannel_failed(&mut self, _: SubchannelId, _: String, _: Instant) {}
        fn subchannel_closed(&mut self, _: SubchannelId, _: Instant) {}
        fn ejection_changed(&mut self, _: &Address, _: Instant) {}
        fn handle_timeout(&mut self, _: Instant) {}
        fn state(&self) -> ConnectivityState {
            ConnectivityState::Idle
        }
        fn subchannels(&self) -> &Subchannels {
            &self.0
        }
        fn subchannels_mut(&mut self) -> &mut Subchannels {
            &mut self.0
        }
    }
    struct BoomBuilder;
    impl LoadBalancerBuilder for BoomBuilder {
        fn name(&self) -> &str {
            "api_tests_boom"
        }
        fn parse_config(&self, _: &serde_json::Value) -> Result<ParsedLbConfig, LbConfigError> {
            Ok(ParsedLbConfig::empty())
        }
        fn build(&self, options: BuildOptions) -> Box<dyn LoadBalancer> {
            Box::new(BoomPolicy(options.into_subchannels(), Boom))
        }
    }
    let dropped = std::panic::catch_unwind(|| {
        let policy = LbPolicy::build(
            &BoomBuilder,
            ParsedLbConfig::empty(),
            BuildOptions::new(Box::new(SplitMix64::new(1))),
        );
        drop(policy);
        let custom = CustomPicker::new(Vec::new(), Arc::new(BoomPicker(Boom)));
        let picker: Picker<u64> = Picker::new(&PickerSpec::Custom(custom.clone()), |_| None, 0);
        drop(custom);
        drop(picker);
        drop(PickGuard::new(Boom));
    });
    assert!(dropped.is_ok(), "a Drop's panic escaped");
}

/// A custom picker's list pairs ids with addresses; the channel uses each subchannel's own address (a
/// stale pairing cannot make a call count against another backend), and leaves out unknown ids.
#[test]
fn a_custom_pickers_addresses_are_the_subchannels_own() {
    let mut lb = build("api_tests_relabel", "{}");
    let endpoints = [Endpoint::new(addr(1)), Endpoint::new(addr(2))];
    let now = Instant::now();
    lb.update(&endpoints, ParsedLbConfig::empty(), now);
    let ids: Vec<SubchannelId> = lb.subchannels().iter().map(|s| s.0).collect();
    for id in &ids {
        lb.subchannel_ready(*id, now);
    }
    drain(&mut lb);
    let custom = CustomPicker::new(
        vec![
            (ids[0], addr(2)),
            (ids[1], addr(1)),
            (SubchannelId(9999), addr(3)),
        ],
        Arc::new(FewestPicker(Vec::new())),
    );
    let fixed = custom.with_addresses(|id| {
        lb.subchannels()
            .into_iter()
            .find(|s| s.0 == id)
            .map(|s| s.1)
    });
    assert_eq!(
        fixed.subchannels(),
        [(ids[0], addr(1)), (ids[1], addr(2))].as_slice()
    );
}
