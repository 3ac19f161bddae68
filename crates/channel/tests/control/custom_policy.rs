//! A load-balancing policy of the application's, registered on the channel builder and selected by the
//! service config: it receives the resolver's endpoints from a real channel, connects real servers on
//! loopback, and its own picker places the calls; as outlier detection's child, a failing backend is
//! ejected from it; a policy or picker that panics becomes a clean UNAVAILABLE error, not a crash.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use grpc_channel::lb::{
    Address, BuildOptions, ConnectivityState, CustomPick, CustomPicker, LbConfigError,
    LoadBalancer, LoadBalancerBuilder, ParsedLbConfig, PickRequest, PickerSpec, PolicyUpdate,
    SubchannelId, SubchannelPicker, Subchannels,
};
use grpc_channel::{Channel, Code};
use grpc_test_support as support;

use super::plugins::{
    backends, connect_all, ready_with_addresses, reconnect_after_backoff, which_within,
};

/// Where the test policy panics, if anywhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PanicIn {
    Nowhere,
    Ready,
    Pick,
}

/// The test policy's config.
#[derive(Clone, Copy, Debug)]
struct TestConfig {
    panic_in: PanicIn,
    /// Rotate over every READY endpoint instead of using the last one.
    rotate: bool,
}

/// What the test policy saw.
#[derive(Default)]
struct Seen {
    endpoints: Mutex<Vec<Vec<Address>>>,
    ready: AtomicU64,
    picks: AtomicU64,
}

/// "The last endpoint": connects every endpoint, sends every call to the last one of the list once it is
/// READY.
struct LastBuilder {
    seen: Arc<Seen>,
}

impl LoadBalancerBuilder for LastBuilder {
    fn name(&self) -> &str {
        "test_last_endpoint"
    }

    fn parse_config(&self, config: &serde_json::Value) -> Result<ParsedLbConfig, LbConfigError> {
        let panic_in = match config.get("panicIn").and_then(|v| v.as_str()) {
            None => PanicIn::Nowhere,
            Some("ready") => PanicIn::Ready,
            Some("pick") => PanicIn::Pick,
            Some(other) => {
                return Err(LbConfigError::invalid(
                    self.name(),
                    format!("unknown panicIn {other:?}"),
                ))
            }
        };
        let rotate = config.get("rotate").and_then(|v| v.as_bool()) == Some(true);
        Ok(ParsedLbConfig::new(TestConfig { panic_in, rotate }))
    }

    fn build(&self, options: BuildOptions) -> Box<dyn LoadBalancer> {
        Box::new(Last {
            subs: options.into_subchannels(),
            order: Vec::new(),
            state: ConnectivityState::Idle,
            panic_in: PanicIn::Nowhere,
            rotate: false,
            seen: self.seen.clone(),
        })
    }
}

struct Last {
    subs: Subchannels,
    order: Vec<SubchannelId>,
    state: ConnectivityState,
    panic_in: PanicIn,
    rotate: bool,
    seen: Arc<Seen>,
}

/// Picks the subchannels of its list in turn (the last endpoint's alone, unless rotating).
struct TestPicker {
    ids: Vec<SubchannelId>,
    next: AtomicUsize,
    panic: bool,
    seen: Arc<Seen>,
}

impl SubchannelPicker for TestPicker {
    fn pick(&self, _request: &PickRequest<'_>) -> CustomPick {
        assert!(!self.panic, "the test picker gives up");
        self.seen.picks.fetch_add(1, Ordering::Relaxed);
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        CustomPick::subchannel(self.ids[turn % self.ids.len()])
    }
}

impl Last {
    fn publish(&mut self) {
        let candidates: &[SubchannelId] = match (self.rotate, self.order.last()) {
            (true, _) => &self.order,
            (false, Some(last)) => std::slice::from_ref(last),
            (false, None) => &[],
        };
        let ready = ready_with_addresses(&self.subs, candidates);
        let (state, picker) = if ready.is_empty() {
            (ConnectivityState::Connecting, PickerSpec::Queue)
        } else {
            let picker = TestPicker {
                ids: ready.iter().map(|(id, _)| *id).collect(),
                next: AtomicUsize::new(0),
                panic: self.panic_in == PanicIn::Pick,
                seen: self.seen.clone(),
            };
            (
                ConnectivityState::Ready,
                PickerSpec::Custom(CustomPicker::new(ready, Arc::new(picker))),
            )
        };
        self.state = state;
        self.subs.publish(state, picker);
    }
}

impl LoadBalancer for Last {
    fn update(&mut self, update: PolicyUpdate<'_>, now: Instant) {
        if let Some(c) = update.config.downcast_ref::<TestConfig>() {
            self.panic_in = c.panic_in;
            self.rotate = c.rotate;
        }
        if let Ok(mut seen) = self.seen.endpoints.lock() {
            seen.push(update.addresses());
        }
        self.order = self.subs.sync(&update.addresses());
        connect_all(&mut self.subs, &self.order, now);
        self.publish();
    }

    fn exit_idle(&mut self, _now: Instant) {}

    fn subchannel_ready(&mut self, id: SubchannelId, _now: Instant) {
        assert!(self.panic_in != PanicIn::Ready, "the test policy gives up");
        if self.subs.ready(id) {
            self.seen.ready.fetch_add(1, Ordering::Relaxed);
            self.publish();
        }
    }

    fn subchannel_failed(&mut self, id: SubchannelId, error: String, now: Instant) {
        if self.subs.failed(id, error, now) {
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
        reconnect_after_backoff(&mut self.subs, now);
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

fn channel(addrs: &[SocketAddr], config: &str, seen: &Arc<Seen>) -> Channel {
    let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    Channel::builder(format!("ipv4:{}", list.join(",")))
        .lb_policy(LastBuilder { seen: seen.clone() })
        .default_service_config(config)
        .build()
        .expect("channel")
}

/// One call (10 s deadline); the server that answered it.
async fn call(ch: &Channel) -> Result<String, grpc_channel::Status> {
    which_within(ch, Duration::from_secs(10)).await
}

#[tokio::test]
async fn a_policy_registered_on_the_builder_gets_the_endpoints_connects_them_and_picks() {
    let servers = backends(3).await;
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let seen = Arc::new(Seen::default());
    // The first entry is unknown (skipped); the second is the channel's own policy.
    let ch = channel(
        &addrs,
        r#"{"loadBalancingConfig":[{"no_such_policy":{}},{"test_last_endpoint":{}},{"round_robin":{}}]}"#,
        &seen,
    );
    let mut answered = std::collections::BTreeSet::new();
    for _ in 0..20 {
        answered.insert(call(&ch).await.expect("call"));
    }
    // Every call went to the last endpoint, through the policy's picker.
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert_eq!(seen.picks.load(Ordering::Relaxed), 20);
    let endpoints = seen.endpoints.lock().expect("lock").clone();
    let want: Vec<Address> = addrs.iter().map(|a| Address::Tcp(*a)).collect();
    assert_eq!(endpoints.first(), Some(&want), "{endpoints:?}");
    // It connected the others too (bounded wait: they are on loopback).
    for _ in 0..500 {
        if seen.ready.load(Ordering::Relaxed) == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen.ready.load(Ordering::Relaxed), 3);
    assert_eq!(ch.state(), grpc_channel::ConnectivityState::Ready);
}

#[tokio::test]
async fn a_policy_that_panics_fails_the_channel_with_unavailable() {
    let servers = backends(1).await;
    let seen = Arc::new(Seen::default());
    let ch = channel(
        &[servers[0].addr],
        r#"{"loadBalancingConfig":[{"test_last_endpoint":{"panicIn":"ready"}}]}"#,
        &seen,
    );
    let status = call(&ch).await.expect_err("the policy panicked");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains(
            "load-balancing policy \"test_last_endpoint\" panicked: the test policy gives up"
        ),
        "{status:?}"
    );
    assert_eq!(
        ch.state(),
        grpc_channel::ConnectivityState::TransientFailure
    );
    // The channel is still there: the next call fails the same way, no crash, no hang.
    let again = call(&ch).await.expect_err("still failed");
    assert_eq!(again.code(), Code::Unavailable);
}

#[tokio::test]
async fn a_picker_that_panics_fails_the_call_with_unavailable() {
    let servers = backends(1).await;
    let seen = Arc::new(Seen::default());
    let ch = channel(
        &[servers[0].addr],
        r#"{"loadBalancingConfig":[{"test_last_endpoint":{"panicIn":"pick"}}]}"#,
        &seen,
    );
    let status = call(&ch).await.expect_err("the picker panicked");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status
            .message()
            .contains("load-balancing policy picker panicked: the test picker gives up"),
        "{status:?}"
    );
    // The channel stays READY (its policy is fine); only the calls fail.
    assert_eq!(ch.state(), grpc_channel::ConnectivityState::Ready);
}

#[tokio::test(start_paused = true)]
async fn under_outlier_detection_a_failing_backend_is_ejected_from_the_custom_policy() {
    let (a, b) = (backends(1).await, backends(1).await);
    let bad = support::faulty_server().await;
    let addrs = [a[0].addr, b[0].addr, bad.addr];
    let seen = Arc::new(Seen::default());
    let ch = channel(
        &addrs,
        r#"{"loadBalancingConfig":[{"outlier_detection_experimental":{
            "interval":"1s","baseEjectionTime":"30s","maxEjectionPercent":50,
            "failurePercentageEjection":{"threshold":50,"enforcementPercentage":100,
                                          "minimumHosts":3,"requestVolume":10},
            "childPolicy":[{"test_last_endpoint":{"rotate":true}}]}}]}"#,
        &seen,
    );
    // Rounds of 60 calls, each followed by a sweep, until the failing backend is ejected (bounded).
    let mut failed_before = 0;
    for _ in 0..5 {
        for _ in 0..60 {
            if call(&ch).await.is_err() {
                failed_before += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
        if !ch.stats().ejected_addresses.is_empty() {
            break;
        }
    }
    assert!(failed_before > 0, "the failing backend took calls");
    assert_eq!(ch.stats().ejected_addresses, [bad.addr.to_string()]);
    // Ejected: the policy's picker leaves it out, and every call succeeds.
    for _ in 0..30 {
        call(&ch).await.expect("a healthy backend");
    }
    assert!(seen.picks.load(Ordering::Relaxed) >= 30);
}
