//! Deterministic timeline tests of the xDS cluster manager with an injected clock and seeded randomness.
//! Actions show as short strings: `connect 0 10.0.0.1:443`, `disconnect 1`, `resolve`, and pickers as
//! `Ready {a: READY [0,1|2], b: queue}` (the aggregate state, then per cluster its READY localities'
//! subchannels, or `queue`, `idle`, `fail`).

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use grpc_base::{Address, SplitMix64};

use crate::{
    BreakerClaim, ClusterConfig, ClusterPick, ConnectivityState, DropOverload, LbAction, LbPolicy,
    LocalityConfig, PickRequest, PickResult, Picker, PickerSpec, PolicyConfig, PriorityConfig,
    SubchannelId, TransportKey, XdsClustersConfig, DEACTIVATION_RETENTION,
};

fn v4(n: u8) -> Address {
    Address::Tcp(([10, 0, 0, n], 443).into())
}

fn locality(name: &str, weight: u32, addrs: &[u8]) -> LocalityConfig {
    LocalityConfig {
        name: name.to_owned(),
        weight: NonZeroU32::new(weight).expect("a weight > 0"),
        addresses: addrs.iter().map(|n| v4(*n)).collect(),
        endpoint_weights: Vec::new(),
    }
}

/// One locality per priority, with these addresses.
fn priorities(list: &[&[u8]]) -> ClusterConfig {
    ClusterConfig::new(
        list.iter()
            .enumerate()
            .map(|(i, addrs)| PriorityConfig {
                localities: vec![locality(&format!("p{i}"), 1, addrs)],
            })
            .collect(),
    )
}

fn config(clusters: Vec<(&str, ClusterConfig)>) -> XdsClustersConfig {
    XdsClustersConfig {
        clusters: clusters
            .into_iter()
            .map(|(n, c)| (n.to_owned(), c))
            .collect(),
    }
}

struct Sim {
    lb: LbPolicy,
    start: Instant,
    now: Instant,
    spec: Option<PickerSpec>,
}

impl Sim {
    fn new() -> Sim {
        let start = Instant::now();
        Sim {
            lb: LbPolicy::new(
                PolicyConfig::XdsClusterManager,
                Box::new(SplitMix64::new(7)),
            ),
            start,
            now: start,
            spec: None,
        }
    }

    fn with(clusters: Vec<(&str, ClusterConfig)>) -> Sim {
        let mut s = Sim::new();
        s.update(clusters);
        s
    }

    fn update(&mut self, clusters: Vec<(&str, ClusterConfig)>) {
        assert!(self.lb.update_clusters(config(clusters), self.now));
    }

    fn ms(&self) -> u128 {
        (self.now - self.start).as_millis()
    }

    fn actions(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(a) = self.lb.poll_action() {
            out.push(match a {
                LbAction::Connect {
                    id,
                    addr,
                    transport,
                    ..
                } => match transport {
                    None => format!("connect {} {addr}", id.0),
                    Some(t) => format!("connect {} {addr} via {t}", id.0),
                },
                LbAction::Disconnect { id } => format!("disconnect {}", id.0),
                LbAction::ResolveNow => "resolve".to_owned(),
                LbAction::UpdatePicker { state, picker } => {
                    let shown = show(&picker);
                    self.spec = Some(picker);
                    format!("{state:?} {shown}")
                }
            });
        }
        out
    }

    /// The connects and disconnects among the actions.
    fn connections(&mut self) -> Vec<String> {
        self.actions()
            .into_iter()
            .filter(|a| a.starts_with("connect") || a.starts_with("disconnect"))
            .collect()
    }

    /// The last picker shown (after draining the actions).
    fn picker_shown(&mut self) -> String {
        self.actions();
        self.spec.as_ref().map(show).unwrap_or_default()
    }

    fn picker(&mut self, seed: usize) -> Picker<u64> {
        self.actions();
        let spec = self.spec.clone().expect("a picker was published");
        Picker::new(&spec, |id| Some(id.0), seed)
    }

    fn sleep(&mut self, ms: u64) {
        let target = self.now + Duration::from_millis(ms);
        while let Some(at) = self.lb.poll_timeout() {
            if at > target {
                break;
            }
            self.now = at.max(self.now);
            self.lb.handle_timeout(self.now);
        }
        self.now = target;
    }

    fn advance(&mut self) -> u128 {
        let at = self.lb.poll_timeout().expect("a timer");
        self.now = at.max(self.now);
        self.lb.handle_timeout(self.now);
        self.ms()
    }

    fn ready(&mut self, id: u64) {
        self.lb.subchannel_ready(SubchannelId(id), self.now);
    }

    fn fail(&mut self, id: u64) {
        self.lb
            .subchannel_failed(SubchannelId(id), "connection refused".into(), self.now);
    }

    fn closed(&mut self, id: u64) {
        self.lb.subchannel_closed(SubchannelId(id), self.now);
    }
}

fn show(spec: &PickerSpec) -> String {
    let PickerSpec::Clusters(clusters) = spec else {
        return format!("{spec:?}");
    };
    let parts: Vec<String> = clusters
        .iter()
        .map(|(name, c)| {
            let state = match &c.state {
                ClusterPick::Idle => "idle".to_owned(),
                ClusterPick::Queue => "queue".to_owned(),
                ClusterPick::Fail(_) => "fail".to_owned(),
                ClusterPick::Ring(ring) => format!("ring of {}", ring.endpoints().len()),
                ClusterPick::Aggregate(leaves) => format!("aggregate of {}", leaves.join(",")),
                ClusterPick::Ready(localities) => {
                    let ls: Vec<String> = localities
                        .iter()
                        .map(|l| {
                            let ids: Vec<String> = l
                                .subchannels
                                .iter()
                                .map(|(id, _)| id.0.to_string())
                                .collect();
                            ids.join(",")
                        })
                        .collect();
                    format!("READY [{}]", ls.join("|"))
                }
            };
            format!("{name}: {state}")
        })
        .collect();
    format!("{{{}}}", parts.join(", "))
}

fn pick(p: &Picker<u64>, cluster: &str) -> PickResult<u64> {
    p.pick(&PickRequest {
        method: "/a.B/C",
        avoid: &[],
        cluster: Some(cluster),
        hash: None,
    })
}

fn picked(p: &Picker<u64>, cluster: &str) -> u64 {
    match pick(p, cluster) {
        PickResult::Pick { handle, .. } => handle,
        other => panic!("{other:?}"),
    }
}

#[test]
fn priorities_are_created_lazily_and_fail_over_after_10_s_of_connecting() {
    let mut s = Sim::with(vec![("a", priorities(&[&[1], &[2]]))]);
    assert_eq!(
        s.actions(),
        ["connect 0 10.0.0.1:443", "Connecting {a: queue}"],
        "priority 1 is not created while priority 0's failover timer runs"
    );
    s.sleep(9_999);
    assert_eq!(s.actions(), Vec::<String>::new());
    assert_eq!(s.advance(), 10_000);
    assert_eq!(s.actions(), ["connect 1 10.0.0.2:443"]);
    s.ready(1);
    assert_eq!(s.actions(), ["Ready {a: READY [1]}"]);
    assert_eq!(picked(&s.picker(0), "a"), 1);
    // Priority 0 comes up: back to it at once; priority 1 is deactivated and keeps its connection.
    s.ready(0);
    assert_eq!(s.actions(), ["Ready {a: READY [0]}"]);
    assert_eq!(picked(&s.picker(0), "a"), 0);
}

#[test]
fn a_failing_priority_fails_over_at_once() {
    let mut s = Sim::with(vec![("a", priorities(&[&[1], &[2], &[3]]))]);
    s.actions();
    s.sleep(100);
    s.fail(0);
    assert_eq!(
        s.actions(),
        ["resolve", "connect 1 10.0.0.2:443"],
        "priority 1 at 100 ms, not 10 s; the cluster forwards its CONNECTING state"
    );
    assert_eq!(s.lb.state(), ConnectivityState::Connecting);
    assert_eq!(s.ms(), 100);
    // Priority 1 fails too: priority 2.
    s.fail(1);
    assert_eq!(s.connections(), ["connect 2 10.0.0.3:443"]);
    s.ready(2);
    assert_eq!(s.picker_shown(), "{a: READY [2]}");
    assert_eq!(s.lb.state(), ConnectivityState::Ready);
}

#[test]
fn every_priority_failing_uses_the_last_and_fails_calls_with_the_clusters_message() {
    let mut s = Sim::with(vec![("a", priorities(&[&[1], &[2]]))]);
    s.fail(0);
    s.fail(1);
    assert_eq!(s.picker_shown(), "{a: fail}");
    assert_eq!(s.lb.state(), ConnectivityState::TransientFailure);
    match pick(&s.picker(0), "a") {
        PickResult::Fail(m) => {
            assert!(
                m.contains("cluster a") && m.contains("priority 1") && m.contains("refused"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_ready_priority_that_starts_connecting_restarts_its_failover_timer() {
    let mut s = Sim::with(vec![("a", priorities(&[&[1], &[2]]))]);
    s.sleep(5_000);
    s.ready(0);
    s.actions();
    // Losing the connection: round_robin reconnects, the child is CONNECTING having been READY.
    s.closed(0);
    assert_eq!(
        s.actions(),
        ["resolve", "connect 0 10.0.0.1:443", "Connecting {a: queue}"]
    );
    // The timer started at creation would have fired at 10 s; the restarted one fires at 15 s.
    assert_eq!(s.advance(), 15_000);
    assert_eq!(s.connections(), ["connect 1 10.0.0.2:443"]);
}

#[test]
fn a_higher_priority_in_its_failover_window_is_used_even_if_a_lower_one_is_ready() {
    let mut s = Sim::with(vec![("a", priorities(&[&[1], &[2]]))]);
    s.fail(0);
    s.ready(1);
    assert_eq!(s.picker_shown(), "{a: READY [1]}");
    // Priority 0's backoff ends and it reconnects: sticky TRANSIENT_FAILURE, so priority 1 stays in use.
    s.advance();
    assert_eq!(s.connections(), ["connect 0 10.0.0.1:443"]);
    assert_eq!(s.picker_shown(), "{a: READY [1]}");
    s.ready(0);
    assert_eq!(s.picker_shown(), "{a: READY [0]}");
}

#[test]
fn a_deactivated_priority_keeps_its_connections_for_15_minutes() {
    let mut s = Sim::with(vec![("a", priorities(&[&[1], &[2]]))]);
    s.fail(0);
    s.ready(1);
    s.advance();
    s.ready(0);
    s.actions();
    let deactivated = s.now;
    s.sleep(DEACTIVATION_RETENTION.as_millis() as u64 - 1);
    assert_eq!(s.connections(), Vec::<String>::new());
    s.sleep(1);
    assert_eq!(s.now - deactivated, DEACTIVATION_RETENTION);
    assert_eq!(s.connections(), ["disconnect 1"]);
    // Needed again later: created anew (a new subchannel), after the failover rules.
    s.closed(0);
    s.fail(0);
    assert_eq!(
        s.connections(),
        ["connect 0 10.0.0.1:443", "connect 2 10.0.0.2:443"]
    );
}

#[test]
fn a_reactivated_priority_is_not_removed() {
    let mut s = Sim::with(vec![("a", priorities(&[&[1], &[2]]))]);
    s.fail(0);
    s.ready(1);
    s.advance();
    s.ready(0);
    s.actions();
    s.sleep(60_000);
    // Priority 0 fails: priority 1 (still READY) is used again and no longer deactivated.
    s.closed(0);
    s.fail(0);
    assert_eq!(s.picker_shown(), "{a: READY [1]}");
    s.sleep(DEACTIVATION_RETENTION.as_millis() as u64);
    assert!(
        !s.connections().contains(&"disconnect 1".to_owned()),
        "priority 1 is in use"
    );
    assert_eq!(s.picker_shown(), "{a: READY [1]}");
}

#[test]
fn an_empty_priority_list_fails_the_cluster() {
    let mut s = Sim::with(vec![("a", ClusterConfig::new(Vec::new()))]);
    assert_eq!(s.actions(), ["TransientFailure {a: fail}"]);
    match pick(&s.picker(0), "a") {
        PickResult::Fail(m) => assert!(m.contains("empty priority list"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn localities_share_picks_by_weight_over_ready_localities_only() {
    let cluster = ClusterConfig::new(vec![PriorityConfig {
        localities: vec![locality("east", 1, &[1, 2]), locality("west", 3, &[3])],
    }]);
    let mut s = Sim::with(vec![("a", cluster)]);
    s.ready(0);
    s.ready(1);
    assert_eq!(
        s.picker_shown(),
        "{a: READY [0,1]}",
        "west is not READY yet"
    );
    let p = s.picker(11);
    assert!((0..100).all(|_| picked(&p, "a") < 2));
    s.ready(2);
    assert_eq!(s.picker_shown(), "{a: READY [0,1|2]}");
    let p = s.picker(12345);
    let mut counts = [0u32; 3];
    for _ in 0..8_000 {
        counts[picked(&p, "a") as usize] += 1;
    }
    // east gets 1/4 (split evenly by round_robin), west 3/4, within 5 %.
    assert!(counts[2].abs_diff(6_000) <= 300, "{counts:?}");
    assert!(counts[0].abs_diff(counts[1]) <= 1, "{counts:?}");
}

#[test]
fn the_avoid_hint_steers_picks_within_the_locality() {
    let mut s = Sim::with(vec![("a", priorities(&[&[1, 2, 3]]))]);
    for id in 0..3 {
        s.ready(id);
    }
    let p = s.picker(0);
    let avoid = [v4(1), v4(3)];
    for _ in 0..10 {
        match p.pick(&PickRequest {
            method: "/a.B/C",
            avoid: &avoid,
            cluster: Some("a"),
            hash: None,
        }) {
            PickResult::Pick { handle, addr, .. } => assert_eq!((handle, addr), (1, v4(2))),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_locality_that_failed_stays_transient_failure_until_ready() {
    let mut s = Sim::with(vec![("a", priorities(&[&[1]]))]);
    s.fail(0);
    assert_eq!(s.picker_shown(), "{a: fail}");
    // A new endpoint in the locality starts CONNECTING; the locality stays TRANSIENT_FAILURE.
    s.update(vec![("a", priorities(&[&[1, 2]]))]);
    assert_eq!(s.connections(), ["connect 1 10.0.0.2:443"]);
    assert_eq!(s.picker_shown(), "{a: fail}");
    assert_eq!(s.lb.state(), ConnectivityState::TransientFailure);
    s.ready(1);
    assert_eq!(s.picker_shown(), "{a: READY [1]}");
}

#[test]
fn two_clusters_share_the_subchannel_of_a_common_address() {
    let mut s = Sim::with(vec![
        ("a", priorities(&[&[1, 2]])),
        ("b", priorities(&[&[2, 3]])),
    ]);
    assert_eq!(
        s.connections(),
        [
            "connect 0 10.0.0.1:443",
            "connect 1 10.0.0.2:443",
            "connect 2 10.0.0.3:443"
        ],
        "one subchannel per distinct address"
    );
    s.ready(1);
    assert_eq!(s.picker_shown(), "{a: READY [1], b: READY [1]}");
    let p = s.picker(0);
    assert_eq!((picked(&p, "a"), picked(&p, "b")), (1, 1));
    // Cluster a goes: its own address is disconnected, the shared one stays.
    s.update(vec![("b", priorities(&[&[2, 3]]))]);
    assert_eq!(s.connections(), ["disconnect 0"]);
    assert_eq!(s.picker_shown(), "{b: READY [1]}");
}

#[test]
fn aggregate_state_over_clusters() {
    let mut s = Sim::with(vec![("a", priorities(&[&[1]])), ("b", priorities(&[&[2]]))]);
    s.actions();
    assert_eq!(s.lb.state(), ConnectivityState::Connecting);
    s.fail(0);
    assert_eq!(s.lb.state(), ConnectivityState::Connecting, "b connects");
    s.ready(1);
    assert_eq!(s.lb.state(), ConnectivityState::Ready, "any READY");
    s.closed(1);
    s.fail(1);
    assert_eq!(s.lb.state(), ConnectivityState::TransientFailure);
    // a's backoff ends and it reconnects: still TRANSIENT_FAILURE (sticky) until READY.
    s.advance();
    assert_eq!(s.lb.state(), ConnectivityState::TransientFailure);
    s.ready(0);
    assert_eq!(s.lb.state(), ConnectivityState::Ready);
    let none = Sim::with(Vec::new());
    assert_eq!(none.lb.state(), ConnectivityState::TransientFailure);
}

#[test]
fn an_aggregate_delegates_to_its_first_leaf_that_can_take_the_call_under_that_leafs_drops() {
    let mut dropping = priorities(&[&[1]]);
    dropping.drop_overloads = vec![DropOverload {
        category: "all".to_owned(),
        per_million: 1_000_000,
    }];
    let mut s = Sim::with(vec![
        (
            "agg",
            ClusterConfig::aggregate(vec!["gone".to_owned(), "a".to_owned(), "b".to_owned()]),
        ),
        ("a", dropping),
        ("b", priorities(&[&[2]])),
    ]);
    s.actions();
    // "a" connects: the call queues (its drops apply to its own picks only).
    let p = s.picker(0);
    assert!(
        matches!(pick(&p, "agg"), PickResult::Drop(_)),
        "a's drops while a is tried"
    );
    assert_eq!(s.lb.state(), ConnectivityState::Connecting);
    s.ready(1);
    s.fail(0);
    // "a" fails: "b" serves, without "a"'s drops.
    assert_eq!(picked(&s.picker(0), "agg"), 1);
    assert_eq!(s.lb.state(), ConnectivityState::Ready);
    // No leaf known: the call fails, naming the aggregate.
    s.update(vec![(
        "agg",
        ClusterConfig::aggregate(vec!["gone".to_owned()]),
    )]);
    let p = s.picker(0);
    assert!(matches!(pick(&p, "agg"), PickResult::Fail(m) if m.contains("aggregate cluster agg")));
    assert_eq!(s.lb.state(), ConnectivityState::TransientFailure);
}

#[test]
fn a_single_endpoint_clusters_calls_stay_on_one_ready_address_and_fail_over() {
    let mut dns = priorities(&[&[1, 2]]);
    dns.single_endpoint = true;
    let mut s = Sim::with(vec![("dns", dns)]);
    s.actions();
    s.ready(1);
    s.ready(0);
    // The first READY address keeps the calls.
    for seed in 0..8 {
        assert_eq!(picked(&s.picker(seed), "dns"), 1);
    }
    s.closed(1);
    for seed in 0..8 {
        assert_eq!(picked(&s.picker(seed), "dns"), 0);
    }
}

#[test]
fn unknown_removed_and_missing_clusters_fail() {
    let mut s = Sim::with(vec![("a", priorities(&[&[1]]))]);
    s.ready(0);
    let p = s.picker(0);
    match pick(&p, "zzz") {
        PickResult::Fail(m) => assert!(m.contains("zzz"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        p.pick(&PickRequest::default()),
        PickResult::Fail(_)
    ));
    // Removed: gone at once, with its connection.
    s.update(vec![("b", priorities(&[&[2]]))]);
    assert_eq!(s.connections(), ["disconnect 0", "connect 1 10.0.0.2:443"]);
    assert!(matches!(pick(&s.picker(0), "a"), PickResult::Fail(_)));
    assert_eq!(
        pick(&s.picker(0), "b"),
        PickResult::Queue { exit_idle: false }
    );
}

#[test]
fn an_update_keeps_the_connections_of_addresses_that_stay() {
    let mut s = Sim::with(vec![("a", priorities(&[&[1, 2]]))]);
    s.ready(0);
    s.ready(1);
    s.actions();
    s.update(vec![("a", priorities(&[&[2, 3], &[4]]))]);
    assert_eq!(s.connections(), ["connect 2 10.0.0.3:443", "disconnect 0"]);
    assert_eq!(s.picker_shown(), "{a: READY [1]}");
    assert_eq!(
        s.lb.subchannel_state(SubchannelId(1)),
        ConnectivityState::Ready
    );
    // Moving an address to another locality keeps its connection too.
    let moved = ClusterConfig::new(vec![PriorityConfig {
        localities: vec![locality("p0", 1, &[4]), locality("other", 2, &[2])],
    }]);
    s.update(vec![("a", moved)]);
    assert_eq!(
        s.connections(),
        ["connect 3 10.0.0.4:443", "disconnect 2"],
        "10.0.0.2 stays; priority 1 (10.0.0.4) is gone"
    );
    assert_eq!(s.picker_shown(), "{a: READY [1]}");
}

#[test]
fn eds_drops_at_the_configured_rate_and_are_never_queued() {
    let mut cluster = priorities(&[&[1]]);
    cluster.drop_overloads = vec![
        DropOverload {
            category: "lb".to_owned(),
            per_million: 200_000,
        },
        DropOverload {
            category: "throttle".to_owned(),
            per_million: 50_000,
        },
    ];
    let mut s = Sim::with(vec![("a", cluster.clone())]);
    // Drops apply before the priority's picker: even while it queues.
    let p = s.picker(3);
    let results: Vec<PickResult<u64>> = (0..1_000).map(|_| pick(&p, "a")).collect();
    assert!(results.iter().any(|r| matches!(r, PickResult::Drop(_))));
    assert!(results
        .iter()
        .all(|r| matches!(r, PickResult::Drop(_) | PickResult::Queue { .. })));
    s.ready(0);
    let p = s.picker(99);
    let (mut lb, mut throttle, mut picks) = (0u32, 0u32, 0u32);
    for _ in 0..20_000 {
        match pick(&p, "a") {
            PickResult::Drop(m) if m.contains("lb") => lb += 1,
            PickResult::Drop(m) if m.contains("throttle") => throttle += 1,
            PickResult::Pick { .. } => picks += 1,
            other => panic!("{other:?}"),
        }
    }
    // 20 % of all calls, then 5 % of the other 80 %.
    assert!(lb.abs_diff(4_000) <= 300, "{lb}");
    assert!(throttle.abs_diff(800) <= 120, "{throttle}");
    assert_eq!(lb + throttle + picks, 20_000);
    // A million per million drops all; none drops none.
    cluster.drop_overloads = vec![DropOverload {
        category: "all".to_owned(),
        per_million: 1_000_000,
    }];
    s.update(vec![("a", cluster.clone())]);
    let p = s.picker(5);
    assert!((0..100).all(|_| pick(&p, "a") == PickResult::Drop("EDS-configured drop: all".into())));
    cluster.drop_overloads.clear();
    s.update(vec![("a", cluster)]);
    let p = s.picker(5);
    assert!((0..100).all(|_| picked(&p, "a") == 0));
}

#[test]
fn the_circuit_breaker_drops_at_max_requests_until_a_call_ends() {
    let mut cluster = priorities(&[&[1]]);
    cluster.max_requests = 2;
    let mut s = Sim::with(vec![("a", cluster.clone()), ("b", priorities(&[&[1]]))]);
    s.ready(0);
    let p = s.picker(0);
    let guard = |r: PickResult<u64>| -> BreakerClaim {
        match r {
            PickResult::Pick { guard: Some(g), .. } => g.claim().cloned().expect("a claim"),
            other => panic!("{other:?}"),
        }
    };
    let first = guard(pick(&p, "a"));
    let second = guard(pick(&p, "a"));
    assert_eq!(
        pick(&p, "a"),
        PickResult::Drop("circuit breaker drop".into())
    );
    // Another cluster has its own count.
    let _other = guard(pick(&p, "b"));
    drop(first);
    let third = guard(pick(&p, "a"));
    assert_eq!(
        pick(&p, "a"),
        PickResult::Drop("circuit breaker drop".into())
    );
    // The count survives a config update and the new picker: lowering the limit rejects calls until
    // the calls in flight fall below it.
    cluster.max_requests = 1;
    s.update(vec![("a", cluster.clone()), ("b", priorities(&[&[1]]))]);
    let p = s.picker(0);
    assert_eq!(
        pick(&p, "a"),
        PickResult::Drop("circuit breaker drop".into())
    );
    drop(second);
    assert_eq!(
        pick(&p, "a"),
        PickResult::Drop("circuit breaker drop".into())
    );
    drop(third);
    let fourth = guard(pick(&p, "a"));
    // A clone is a claim of its own.
    let fifth = fourth.clone();
    drop(fourth);
    assert_eq!(
        pick(&p, "a"),
        PickResult::Drop("circuit breaker drop".into())
    );
    drop(fifth);
    drop(guard(pick(&p, "a")));
    // A call that does not get a connection holds no claim.
    let PickerSpec::Clusters(spec) = s.spec.clone().expect("a picker") else {
        panic!()
    };
    assert_eq!(spec["a"].in_flight.in_flight(), 0);
}

#[test]
fn a_queued_pick_holds_no_claim() {
    let mut cluster = priorities(&[&[1]]);
    cluster.max_requests = 1;
    let mut s = Sim::with(vec![("a", cluster)]);
    let p = s.picker(0);
    for _ in 0..3 {
        assert_eq!(pick(&p, "a"), PickResult::Queue { exit_idle: false });
    }
    s.ready(0);
    let p = s.picker(0);
    assert!(matches!(
        pick(&p, "a"),
        PickResult::Pick { guard: Some(_), .. }
    ));
}

#[test]
fn other_policies_ignore_cluster_updates_and_this_one_address_lists() {
    let mut rr = LbPolicy::new(PolicyConfig::RoundRobin, Box::new(SplitMix64::new(1)));
    assert!(!rr.update_clusters(config(vec![("a", priorities(&[&[1]]))]), Instant::now()));
    assert_eq!(rr.poll_action(), None);
    let mut s = Sim::new();
    s.lb.update_addresses(vec![v4(1)], s.now);
    assert_eq!(s.actions(), Vec::<String>::new());
}

#[test]
fn with_no_priority_usable_the_first_connecting_one_is_used_else_the_last() {
    let mut s = Sim::with(vec![("a", priorities(&[&[1], &[2]]))]);
    s.actions();
    assert_eq!(s.advance(), 10_000);
    assert_eq!(s.connections(), ["connect 1 10.0.0.2:443"]);
    // Priority 1 fails while priority 0 still connects (its timer expired): priority 0, queueing.
    s.fail(1);
    assert_eq!(s.picker_shown(), "{a: queue}");
    // Priority 0's attempt times out at 20 s: both failed, the last one is used.
    s.sleep(10_000);
    assert_eq!(s.ms(), 20_000);
    assert_eq!(s.picker_shown(), "{a: fail}");
}

#[test]
fn a_failed_cluster_counts_as_transient_failure_until_ready() {
    let mut s = Sim::with(vec![("a", priorities(&[&[1]]))]);
    s.fail(0);
    s.actions();
    assert_eq!(s.lb.state(), ConnectivityState::TransientFailure);
    // A new priority connects: the cluster's picker queues, the aggregate stays TRANSIENT_FAILURE.
    s.update(vec![("a", priorities(&[&[1], &[2]]))]);
    assert_eq!(s.connections(), ["connect 1 10.0.0.2:443"]);
    assert_eq!(s.picker_shown(), "{a: queue}");
    assert_eq!(s.lb.state(), ConnectivityState::TransientFailure);
    s.ready(1);
    assert_eq!(s.lb.state(), ConnectivityState::Ready);
}

#[test]
fn the_circuit_breaker_applies_before_a_queueing_picker() {
    let mut cluster = priorities(&[&[1]]);
    cluster.max_requests = 1;
    let mut s = Sim::with(vec![("a", cluster)]);
    s.ready(0);
    let held = pick(&s.picker(0), "a");
    assert!(matches!(held, PickResult::Pick { guard: Some(_), .. }));
    s.closed(0);
    assert_eq!(s.picker_shown(), "{a: queue}");
    assert_eq!(
        pick(&s.picker(0), "a"),
        PickResult::Drop("circuit breaker drop".into())
    );
    drop(held);
    assert_eq!(
        pick(&s.picker(0), "a"),
        PickResult::Queue { exit_idle: false }
    );
}

mod ejections_and_transports;
