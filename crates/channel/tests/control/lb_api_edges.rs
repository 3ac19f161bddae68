//! Edges of the public load-balancing policy API, from outside the crate (public items only): a user's
//! "fewest calls in flight" policy whose code panics in every place a user's code runs (its config parser,
//! its `Drop`, its picker's `Drop`, a pick guard's `Drop`) and the channel goes on; a policy that panicked
//! once recovers through a re-resolution; a registered policy of a built-in's name is the default too; only
//! the chosen `loadBalancingConfig` entry is parsed; round_robin over multi-address endpoints (A61);
//! outlier detection counts a custom picker's calls against the connection's real address; A21 with a
//! rejected user config, the channel's policy over the process-wide one, a graceful switch between a
//! user's policy and round_robin.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use grpc_channel::lb::{
    Address, BuildOptions, ConnectivityState, CustomPick, CustomPicker, InFlightCounter,
    LbConfigError, LoadBalancer, LoadBalancerBuilder, ParsedLbConfig, PickGuard, PickRequest,
    PickerSpec, PolicyRegistry, PolicyUpdate, SubchannelId, SubchannelPicker, Subchannels,
};
use grpc_channel::resolver::{
    manual, Endpoint, Resolver, ResolverBuilder, ResolverError, ResolverSink, ResolverTarget,
    ResolverUpdate, UpdateError,
};
use grpc_channel::service_config::{ParseOptions, ServiceConfig};
use grpc_channel::{Channel, Code, ResolverOptions};
use parking_lot::Mutex;

use super::plugins::{
    backends, channel_with, connect_all, endpoint, ready_with_addresses, reconnect_after_backoff,
    which_within,
};

/// Where the edge policy misbehaves.
#[derive(Clone, Default)]
struct Faults {
    /// Its `Drop` panics.
    panic_on_drop: bool,
    /// Its first `subchannel_ready` (of all the policies this builder builds) panics.
    panic_first_ready: Option<Arc<AtomicBool>>,
    /// The guard its picker hands each call panics when the call drops it.
    guard_panics: bool,
    /// Its pickers' `Drop` panics.
    picker_drop_panics: bool,
    /// Its picker's list pairs each subchannel with the next one's address (a stale id-to-address map).
    mislabel: bool,
}

/// "Fewest calls in flight", written with public items only; `parse_config` panics on `{"explode":true}`
/// and rejects a non-object.
struct EdgeBuilder {
    name: &'static str,
    faults: Faults,
    builds: Arc<AtomicUsize>,
    parses: Arc<AtomicUsize>,
}

impl EdgeBuilder {
    fn new(name: &'static str, faults: Faults) -> EdgeBuilder {
        EdgeBuilder {
            name,
            faults,
            builds: Arc::default(),
            parses: Arc::default(),
        }
    }
}

impl LoadBalancerBuilder for EdgeBuilder {
    fn name(&self) -> &str {
        self.name
    }

    fn parse_config(&self, config: &serde_json::Value) -> Result<ParsedLbConfig, LbConfigError> {
        self.parses.fetch_add(1, Ordering::SeqCst);
        let obj = config
            .as_object()
            .ok_or_else(|| LbConfigError::invalid(self.name, "not an object"))?;
        // A parser bug a remote config can reach (e.g. an `unwrap` on a field).
        assert!(obj.get("explode").is_none(), "the edge parser blew up");
        if obj.get("n").is_some_and(|n| !n.is_u64()) {
            return Err(LbConfigError::invalid(self.name, "n is not a number"));
        }
        Ok(ParsedLbConfig::empty())
    }

    fn build(&self, options: BuildOptions) -> Box<dyn LoadBalancer> {
        self.builds.fetch_add(1, Ordering::SeqCst);
        Box::new(Edge {
            subs: options.into_subchannels(),
            order: Vec::new(),
            counters: std::collections::HashMap::new(),
            state: ConnectivityState::Idle,
            faults: self.faults.clone(),
        })
    }
}

struct Edge {
    subs: Subchannels,
    order: Vec<SubchannelId>,
    counters: std::collections::HashMap<SubchannelId, InFlightCounter>,
    state: ConnectivityState,
    faults: Faults,
}

impl Drop for Edge {
    fn drop(&mut self) {
        if self.faults.panic_on_drop && !std::thread::panicking() {
            panic!("the edge policy's drop blew up");
        }
    }
}

/// A guard whose drop panics.
struct PanickyGuard;

impl Drop for PanickyGuard {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("the edge guard's drop blew up");
        }
    }
}

struct Fewest {
    backends: Vec<(SubchannelId, InFlightCounter)>,
    guard_panics: bool,
    drop_panics: bool,
    /// Ties go round the list.
    next: AtomicUsize,
}

impl Drop for Fewest {
    fn drop(&mut self) {
        if self.drop_panics && !std::thread::panicking() {
            panic!("the edge picker's drop blew up");
        }
    }
}

impl SubchannelPicker for Fewest {
    fn pick(&self, _request: &PickRequest<'_>) -> CustomPick {
        let n = self.backends.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let Some((id, counter)) = (0..n)
            .map(|i| &self.backends[(start + i) % n])
            .min_by_key(|(_, c)| c.in_flight())
        else {
            return CustomPick::Queue { exit_idle: false };
        };
        if self.guard_panics {
            return CustomPick::subchannel_with_guard(*id, PickGuard::new(PanickyGuard));
        }
        CustomPick::subchannel_with_guard(*id, PickGuard::from(counter.claim()))
    }
}

impl Edge {
    fn publish(&mut self) {
        let ready = ready_with_addresses(&self.subs, &self.order);
        let (state, picker) = if ready.is_empty() {
            let states = self.order.iter().map(|id| self.subs.state(*id));
            match ConnectivityState::aggregate(states) {
                ConnectivityState::TransientFailure => (
                    ConnectivityState::TransientFailure,
                    PickerSpec::Fail(self.subs.last_error().unwrap_or("down").to_owned()),
                ),
                _ => (ConnectivityState::Connecting, PickerSpec::Queue),
            }
        } else {
            let backends = ready
                .iter()
                .map(|(id, _)| (*id, self.counters.entry(*id).or_default().clone()))
                .collect();
            let picker = Fewest {
                backends,
                guard_panics: self.faults.guard_panics,
                drop_panics: self.faults.picker_drop_panics,
                next: AtomicUsize::new(0),
            };
            let mut ready = ready;
            if self.faults.mislabel && ready.len() > 1 {
                let mut addresses: Vec<Address> = ready.iter().map(|(_, a)| a.clone()).collect();
                addresses.rotate_left(1);
                for ((_, a), b) in ready.iter_mut().zip(addresses) {
                    *a = b;
                }
            }
            (
                ConnectivityState::Ready,
                PickerSpec::Custom(CustomPicker::new(ready, Arc::new(picker))),
            )
        };
        self.state = state;
        self.subs.publish(state, picker);
    }
}

impl LoadBalancer for Edge {
    fn update(&mut self, update: PolicyUpdate<'_>, now: Instant) {
        self.order = self.subs.sync(&update.addresses());
        connect_all(&mut self.subs, &self.order, now);
        self.publish();
    }

    fn exit_idle(&mut self, now: Instant) {
        connect_all(&mut self.subs, &self.order, now);
        self.publish();
    }

    fn subchannel_ready(&mut self, id: SubchannelId, _now: Instant) {
        if let Some(flag) = &self.faults.panic_first_ready {
            assert!(
                flag.swap(true, Ordering::SeqCst),
                "the edge policy blew up once"
            );
        }
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
        reconnect_after_backoff(&mut self.subs, now);
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

/// One call (5 s deadline); the server that answered it.
async fn call(ch: &Channel) -> Result<String, grpc_channel::Status> {
    which_within(ch, Duration::from_secs(5)).await
}

/// A call on its own task: a panic that escapes into the calling task is an error here.
async fn spawned_call(ch: &Channel) -> Result<String, String> {
    let ch = ch.clone();
    match tokio::spawn(async move { call(&ch).await }).await {
        Ok(Ok(id)) => Ok(id),
        Ok(Err(s)) => Err(format!("{:?}: {}", s.code(), s.message())),
        Err(e) => Err(format!("the calling task panicked: {e}")),
    }
}

fn config(name: &str, json: &str) -> String {
    format!(r#"{{"loadBalancingConfig":[{{"{name}":{json}}}]}}"#)
}

/// A config its parser panics on, pushed with the endpoints by the application (or from DNS TXT, a
/// resolver, a control plane): the channel's parse runs the user's `parse_config` with no guard, so the
/// panic unwinds into whoever published the update. It should be an invalid config (A21), not a panic.
#[tokio::test]
async fn a_config_parser_that_panics_is_an_invalid_config_not_a_panic() {
    let servers = backends(1).await;
    let (resolver, endpoints) = manual("edgeparse");
    endpoints
        .set(vec![endpoint(servers[0].addr)])
        .expect("kept");
    let ch = Channel::builder("edgeparse:///x")
        .resolver(resolver)
        .lb_policy(EdgeBuilder::new("edge_parse", Faults::default()))
        .build()
        .expect("channel");
    call(&ch).await.expect("pick_first serves");
    let pushed = catch_unwind(AssertUnwindSafe(|| {
        endpoints.set_service_config(Some(config("edge_parse", r#"{"explode":true}"#)))
    }));
    assert!(
        pushed.is_ok(),
        "the user's parse_config panic escaped into the application's set_service_config"
    );
    // A21: the previous config stays and calls go on.
    call(&ch).await.expect("the previous config still serves");
}

/// Two backends behind the edge policy with `faults` (named `name`); then, if `switch`, a service config
/// that switches to round_robin; then the third backend alone. Whether calls reach it (bounded), else
/// what answered them.
async fn follows_a_new_endpoint_list(
    name: &'static str,
    faults: Faults,
    switch: bool,
) -> Result<(), String> {
    let mut channel = None;
    let result = follows(name, faults, switch, &mut channel).await;
    // Dropping the channel drops its last picker here, on the application's task.
    let dropped = catch_unwind(AssertUnwindSafe(move || drop(channel)));
    match (result, dropped) {
        (result, Ok(())) => result,
        (Ok(()), Err(_)) => Err("dropping the channel panicked".to_owned()),
        (Err(e), Err(_)) => Err(format!("{e}; dropping the channel panicked too")),
    }
}

async fn follows(
    name: &'static str,
    faults: Faults,
    switch: bool,
    channel: &mut Option<Channel>,
) -> Result<(), String> {
    let servers = backends(3).await;
    let (resolver, endpoints) = manual(name.replace('_', ""));
    endpoints
        .set(vec![endpoint(servers[0].addr), endpoint(servers[1].addr)])
        .expect("kept");
    endpoints
        .set_service_config(Some(config(name, "{}")))
        .expect("kept");
    let built = Channel::builder(format!("{}:///x", name.replace('_', "")))
        .resolver(resolver)
        .lb_policy(EdgeBuilder::new(name, faults))
        .build()
        .expect("channel");
    *channel = Some(built.clone());
    let ch = built;
    if let Err(e) = spawned_call(&ch).await {
        return Err(format!(
            "the first call failed: {e}, channel state {:?}",
            ch.state()
        ));
    }
    if switch {
        endpoints
            .set_service_config(Some(config("round_robin", "{}")))
            .expect("a valid config");
    }
    endpoints
        .set(vec![endpoint(servers[2].addr)])
        .expect("a valid update");
    let want = servers[2].addr.to_string();
    let mut answers = Vec::new();
    for _ in 0..50 {
        let got = spawned_call(&ch).await;
        if got.as_ref().is_ok_and(|id| *id == want) {
            return Ok(());
        }
        answers.push(got);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!(
        "the new endpoint list is never applied: {} calls answered by {:?} (want {want}), channel state {:?}",
        answers.len(),
        answers.iter().collect::<std::collections::BTreeSet<_>>(),
        ch.state()
    ))
}

/// A policy whose `Drop` panics, switched away by a new service config (a graceful switch to
/// round_robin): the event loop drops it unguarded and the loop's task dies. Calls seem fine (the dead
/// loop's last picker and the retired connections live on, the state says READY), but the channel follows
/// nothing any more: a new endpoint list is never applied.
#[tokio::test]
async fn a_policy_whose_drop_panics_does_not_kill_the_channel_on_a_switch() {
    let faults = Faults {
        panic_on_drop: true,
        ..Faults::default()
    };
    let followed = follows_a_new_endpoint_list("edge_drop", faults, true).await;
    assert_eq!(
        followed,
        Ok(()),
        "after a switch away from a policy whose drop panics"
    );
}

/// The same with a picker whose `Drop` panics: the loop drops the previous picker when it publishes the
/// next one, unguarded.
#[tokio::test]
async fn a_picker_whose_drop_panics_does_not_kill_the_channel() {
    let faults = Faults {
        picker_drop_panics: true,
        ..Faults::default()
    };
    let followed = follows_a_new_endpoint_list("edge_picker_drop", faults, false).await;
    assert_eq!(followed, Ok(()), "with a picker whose drop panics");
}

/// A guard (the picker's, handed to the call) whose `Drop` panics: the call drops it on the caller's task,
/// unguarded, so the panic unwinds into the application's `.await`.
#[tokio::test]
async fn a_pick_guard_whose_drop_panics_does_not_panic_the_caller() {
    let servers = backends(1).await;
    let faults = Faults {
        guard_panics: true,
        ..Faults::default()
    };
    let ch = Channel::builder(format!("ipv4:{}", servers[0].addr))
        .lb_policy(EdgeBuilder::new("edge_guard", faults))
        .default_service_config(config("edge_guard", "{}"))
        .build()
        .expect("channel");
    let task = {
        let ch = ch.clone();
        tokio::spawn(async move { call(&ch).await.map(|_| ()) })
    };
    let joined = task.await;
    assert!(
        !joined.as_ref().is_err_and(|e| e.is_panic()),
        "the guard's panic escaped into the calling task: {joined:?}"
    );
}

/// A resolver that, like DNS, answers each ResolveNow with the same endpoints again.
struct Again {
    endpoints: Vec<Endpoint>,
    config: String,
    sink: Arc<Mutex<Option<ResolverSink>>>,
    resolve_nows: Arc<AtomicUsize>,
}

struct AgainResolver {
    update: ResolverUpdate,
    sink: ResolverSink,
    resolve_nows: Arc<AtomicUsize>,
}

impl Resolver for AgainResolver {
    fn resolve_now(&mut self) {
        self.resolve_nows.fetch_add(1, Ordering::SeqCst);
        let _ = self.sink.update(self.update.clone());
    }
}

impl ResolverBuilder for Again {
    fn scheme(&self) -> &str {
        "edgeagain"
    }

    fn build(
        &self,
        _target: &ResolverTarget,
        sink: ResolverSink,
    ) -> Result<Box<dyn Resolver>, ResolverError> {
        let update =
            ResolverUpdate::new(self.endpoints.clone()).with_service_config(self.config.clone());
        let _ = sink.update(update.clone());
        *self.sink.lock() = Some(sink.clone());
        Ok(Box::new(AgainResolver {
            update,
            sink,
            resolve_nows: self.resolve_nows.clone(),
        }))
    }
}

/// A policy that panics once (a bug on a rare path): the module docs promise "the next resolution builds a
/// new one", but nothing asks for one. With a resolver that re-resolves only when asked (DNS, or any
/// watch-less one), the channel stays TRANSIENT_FAILURE for good: fail-fast calls fail, wait-for-ready calls
/// wait out their deadlines.
#[tokio::test]
async fn a_policy_that_panicked_once_recovers_through_a_re_resolution() {
    let servers = backends(1).await;
    let resolve_nows = Arc::new(AtomicUsize::new(0));
    let resolver = Again {
        endpoints: vec![endpoint(servers[0].addr)],
        config: config("edge_once", "{}"),
        sink: Arc::default(),
        resolve_nows: resolve_nows.clone(),
    };
    let faults = Faults {
        panic_first_ready: Some(Arc::new(AtomicBool::new(false))),
        ..Faults::default()
    };
    let builder = EdgeBuilder::new("edge_once", faults);
    let builds = builder.builds.clone();
    let ch = Channel::builder("edgeagain:///x")
        .resolver(resolver)
        .resolver_options(ResolverOptions::default().with_min_interval(Duration::from_millis(10)))
        .lb_policy(builder)
        .build()
        .expect("channel");
    // The first call waits while the first policy connects; when it panics, its failing picker
    // (UNAVAILABLE) is published, but the re-resolution may answer and the next policy replace that
    // picker before the call looks at it (calls see the latest picker, as in grpc-go): the call may then
    // succeed. Either way the panic happened (two builds, a ResolveNow, below).
    let first = call(&ch).await;
    if let Err(e) = &first {
        assert_eq!(e.code(), Code::Unavailable, "{first:?}");
    }
    // Bounded: 50 calls 100 ms apart.
    let mut last = first;
    for _ in 0..50 {
        last = call(&ch).await;
        if last.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        last.is_ok() && builds.load(Ordering::SeqCst) == 2 && resolve_nows.load(Ordering::SeqCst) >= 1,
        "no recovery after one panic: {builds} build(s), {resolve_nows} ResolveNow(s), state {:?}, last {:?}",
        ch.state(),
        last.map_err(|s| s.message().to_owned()),
        builds = builds.load(Ordering::SeqCst),
        resolve_nows = resolve_nows.load(Ordering::SeqCst),
    );
}

/// The registry's docs: "a registered policy of the same name replaces" a built-in. It does when a
/// service config names `pick_first`, but not for the channel's default policy (no service config, or one
/// without a policy), which stays the built-in pick_first.
#[tokio::test]
async fn the_default_policy_is_the_registered_pick_first_too() {
    let servers = backends(1).await;
    let target = format!("ipv4:{}", servers[0].addr);
    // Named in the config: the registered one runs.
    let named = EdgeBuilder::new("pick_first", Faults::default());
    let named_builds = named.builds.clone();
    let ch = Channel::builder(target.clone())
        .lb_policy(named)
        .default_service_config(config("pick_first", "{}"))
        .build()
        .expect("channel");
    call(&ch).await.expect("call");
    assert_eq!(named_builds.load(Ordering::SeqCst), 1);
    // No policy configured: pick_first is the default, and the registered one should be it.
    let default = EdgeBuilder::new("pick_first", Faults::default());
    let default_builds = default.builds.clone();
    let ch = Channel::builder(target)
        .lb_policy(default)
        .build()
        .expect("channel");
    call(&ch).await.expect("call");
    assert_eq!(
        default_builds.load(Ordering::SeqCst),
        1,
        "with no policy configured the built-in pick_first ran, not the registered one"
    );
}

/// The first supported `loadBalancingConfig` entry is the choice, and only it is parsed (grpc-go
/// `internal/serviceconfig`, C-core `ParseLoadBalancingConfig`, grpc-java `selectLbPolicyFromList` all stop
/// there): a later entry for a policy the client also knows is not validated, and its parser never runs.
#[test]
fn only_the_chosen_load_balancing_config_entry_is_parsed() {
    let later = EdgeBuilder::new("edge_later", Faults::default());
    let parses = later.parses.clone();
    let registry = PolicyRegistry::new().with(later);
    let json = r#"{"loadBalancingConfig":[{"round_robin":{}},{"edge_later":{"n":"x"}}]}"#;
    let parsed = ServiceConfig::parse(json, ParseOptions::default().with_policies(registry))
        .map(|c| c.lb_policy().name().to_owned());
    assert_eq!(parsed, Ok("round_robin".to_owned()));
    assert_eq!(
        parses.load(Ordering::SeqCst),
        0,
        "the unchosen entry was parsed"
    );
}

/// Holds (a check of A21 with a user's policy): a registered policy's config its parser rejects makes the
/// update's service config invalid; the channel keeps the last good one and its running policy.
#[tokio::test]
async fn a_rejected_config_of_a_registered_policy_keeps_the_last_good_one() {
    let servers = backends(2).await;
    let (resolver, endpoints) = manual("edgereject");
    endpoints
        .set(servers.iter().map(|s| endpoint(s.addr)).collect())
        .expect("kept");
    endpoints
        .set_service_config(Some(config("edge_reject", "{}")))
        .expect("kept");
    let builder = EdgeBuilder::new("edge_reject", Faults::default());
    let builds = builder.builds.clone();
    let ch = Channel::builder("edgereject:///x")
        .resolver(resolver)
        .lb_policy(builder)
        .build()
        .expect("channel");
    call(&ch).await.expect("call");
    // A21: the invalid config is reported to the resolver (grpc-go's ErrBadResolverState), and the
    // previous config stays in use.
    let rejected = endpoints.set_service_config(Some(config("edge_reject", r#"{"n":"x"}"#)));
    assert!(
        matches!(rejected, Err(UpdateError::Rejected(_))),
        "{rejected:?}"
    );
    for _ in 0..5 {
        call(&ch).await.expect("call");
    }
    assert_eq!(
        builds.load(Ordering::SeqCst),
        1,
        "the running policy stayed"
    );
    // Nested under outlier detection, the same rejection is an invalid config too.
    let nested = r#"{"loadBalancingConfig":[{"outlier_detection_experimental":{"childPolicy":[{"edge_reject":{"n":"x"}}]}}]}"#;
    let registry = PolicyRegistry::new().with(EdgeBuilder::new("edge_reject", Faults::default()));
    assert!(ServiceConfig::parse(nested, ParseOptions::default().with_policies(registry)).is_err());
}

/// Holds: a policy registered on the channel wins over one of the same name registered process-wide.
#[tokio::test]
async fn the_channels_policy_wins_over_the_process_wide_one() {
    let servers = backends(1).await;
    let global = EdgeBuilder::new("edge_both", Faults::default());
    let global_builds = global.builds.clone();
    grpc_channel::lb::register_policy(global);
    let local = EdgeBuilder::new("edge_both", Faults::default());
    let local_builds = local.builds.clone();
    let ch = Channel::builder(format!("ipv4:{}", servers[0].addr))
        .lb_policy(local)
        .default_service_config(config("edge_both", "{}"))
        .build()
        .expect("channel");
    call(&ch).await.expect("call");
    assert_eq!(
        (
            local_builds.load(Ordering::SeqCst),
            global_builds.load(Ordering::SeqCst)
        ),
        (1, 0)
    );
    // A channel without its own uses the process-wide one.
    let ch = Channel::builder(format!("ipv4:{}", servers[0].addr))
        .default_service_config(config("edge_both", "{}"))
        .build()
        .expect("channel");
    call(&ch).await.expect("call");
    assert_eq!(global_builds.load(Ordering::SeqCst), 1);
}

/// Holds: a graceful switch from the user's policy to round_robin and back, with a new endpoint list each
/// time (no policy panics).
#[tokio::test]
async fn a_switch_between_a_users_policy_and_a_built_in_follows_the_endpoints() {
    let followed = follows_a_new_endpoint_list("edge_switch", Faults::default(), true).await;
    assert_eq!(followed, Ok(()));
}

/// gRFC A61: round_robin is a petiole policy, one pick_first child per *endpoint* (its addresses are one
/// backend's, tried in order). The resolver API now delivers multi-address endpoints, but the channel and
/// round_robin flatten them into addresses: the second address of an endpoint whose first one is up takes
/// calls, and an endpoint's share grows with its address count.
#[tokio::test]
async fn round_robin_balances_over_endpoints_not_their_addresses() {
    let servers = backends(3).await;
    let (resolver, endpoints) = manual("edgeendpoints");
    let two =
        Endpoint::from_addresses([Address::Tcp(servers[0].addr), Address::Tcp(servers[1].addr)])
            .expect("two addresses");
    endpoints
        .set(vec![two, endpoint(servers[2].addr)])
        .expect("kept");
    endpoints
        .set_service_config(Some(config("round_robin", "{}")))
        .expect("kept");
    let ch = channel_with("edgeendpoints:///x", resolver);
    // Until all are connected (bounded), then count.
    for _ in 0..50 {
        call(&ch).await.expect("call");
    }
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..40 {
        *counts.entry(call(&ch).await.expect("call")).or_insert(0u32) += 1;
    }
    let second = counts
        .get(&servers[1].addr.to_string())
        .copied()
        .unwrap_or(0);
    let single = counts
        .get(&servers[2].addr.to_string())
        .copied()
        .unwrap_or(0);
    assert!(
        second == 0 && single == 20,
        "the second address of a two-address endpoint took {second} calls and the one-address endpoint \
         {single} of 40 (want 0 and 20): {counts:?}"
    );
}

/// A custom picker's list pairs each subchannel id with an address, and the channel trusts the address
/// (for outlier detection's counts, the pick's address) although the id already names one: a policy whose
/// list is off by one (a stale id-to-address map) makes outlier detection eject a healthy backend, and the
/// failing one keeps its calls. The channel has each connection's real address.
#[tokio::test(start_paused = true)]
async fn outlier_detection_counts_calls_against_the_connections_address() {
    let ok = backends(2).await;
    let bad = grpc_test_support::faulty_server().await;
    let addrs = [ok[0].addr, ok[1].addr, bad.addr];
    let faults = Faults {
        mislabel: true,
        ..Faults::default()
    };
    let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    let ch = Channel::builder(format!("ipv4:{}", list.join(",")))
        .lb_policy(EdgeBuilder::new("edge_mislabel", faults))
        .default_service_config(
            r#"{"loadBalancingConfig":[{"outlier_detection_experimental":{
                "interval":"1s","baseEjectionTime":"30s","maxEjectionPercent":50,
                "failurePercentageEjection":{"threshold":50,"enforcementPercentage":100,
                                              "minimumHosts":3,"requestVolume":10},
                "childPolicy":[{"edge_mislabel":{}}]}}]}"#,
        )
        .build()
        .expect("channel");
    for _ in 0..5 {
        for _ in 0..60 {
            let _ = call(&ch).await;
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
        if !ch.stats().ejected_addresses.is_empty() {
            break;
        }
    }
    assert_eq!(
        ch.stats().ejected_addresses,
        [bad.addr.to_string()],
        "the failing backend is {}; the healthy ones {} and {}",
        bad.addr,
        ok[0].addr,
        ok[1].addr
    );
}
