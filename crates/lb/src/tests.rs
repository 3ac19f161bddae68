//! Deterministic tests of the policies with an injected clock: the harness shows actions as short strings
//! (`connect 0 10.0.0.1:443`, `disconnect 1`, `resolve`, `READY [1]`, `TRANSIENT_FAILURE`, ...).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use grpc_base::{Address, SplitMix64};

use crate::{
    interleave_families, ConnectivityState, Health, LbAction, LbPolicy, PickerSpec, PolicyConfig,
    SubchannelId,
};

fn v4(n: u8) -> Address {
    Address::Tcp(SocketAddr::from(([10, 0, 0, n], 443)))
}

fn v6(n: u16) -> Address {
    Address::Tcp(SocketAddr::from(([0x2001, 0xdb8, 0, 0, 0, 0, 0, n], 443)))
}

struct Sim {
    lb: LbPolicy,
    start: Instant,
    now: Instant,
}

impl Sim {
    fn new(config: PolicyConfig) -> Sim {
        let start = Instant::now();
        Sim {
            lb: LbPolicy::new(config, Box::new(SplitMix64::new(7))),
            start,
            now: start,
        }
    }

    fn ms(&self) -> u128 {
        (self.now - self.start).as_millis()
    }

    fn actions(&mut self) -> Vec<String> {
        std::iter::from_fn(|| self.lb.poll_action())
            .map(|a| match a {
                LbAction::Connect { id, addr, .. } => format!("connect {} {addr}", id.0),
                LbAction::Disconnect { id } => format!("disconnect {}", id.0),
                LbAction::ResolveNow => "resolve".to_owned(),
                LbAction::UpdatePicker { state, picker } => match picker {
                    PickerSpec::Ready(list) => {
                        let ids: Vec<String> =
                            list.iter().map(|(id, _)| id.0.to_string()).collect();
                        format!("READY [{}]", ids.join(","))
                    }
                    PickerSpec::Fail(_) => format!("{state:?}"),
                    PickerSpec::Queue
                    | PickerSpec::Idle
                    | PickerSpec::Clusters(_)
                    | PickerSpec::Custom(_) => {
                        format!("{state:?}")
                    }
                },
            })
            .collect()
    }

    fn advance(&mut self) -> Option<u128> {
        let at = self.lb.poll_timeout()?;
        self.now = at.max(self.now);
        self.lb.handle_timeout(self.now);
        Some(self.ms())
    }

    fn sleep(&mut self, ms: u64) {
        let target = self.now + Duration::from_millis(ms);
        while let Some(at) = self.lb.poll_timeout() {
            if at > target {
                break;
            }
            self.now = at;
            self.lb.handle_timeout(at);
        }
        self.now = target;
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

fn pick_first() -> Sim {
    Sim::new(PolicyConfig::PickFirst {
        shuffle_address_list: false,
    })
}

#[test]
fn connection_backoff_sequence_observed_through_a_failing_address() {
    let mut s = pick_first();
    s.lb.update_addresses(vec![v4(1)], s.now);
    assert_eq!(s.actions(), ["Connecting", "connect 0 10.0.0.1:443"]);
    let mut starts = vec![0u128];
    for _ in 0..8 {
        s.fail(0);
        s.actions();
        // The subchannel backs off, becomes IDLE, and sticky pick_first reconnects it.
        s.advance();
        let a = s.actions();
        assert!(a.contains(&"connect 0 10.0.0.1:443".to_owned()), "{a:?}");
        starts.push(s.ms());
    }
    let gaps: Vec<f64> = starts
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 / 1000.0)
        .collect();
    assert_eq!(gaps[0], 1.0, "1 s after the first attempt, unjittered");
    let mut base = 1.0f64;
    for g in &gaps[1..] {
        base = (base * 1.6f64).min(120.0);
        assert!(
            *g >= base * 0.8 - 0.001 && *g <= base * 1.2 + 0.001,
            "{g} vs {base} in {gaps:?}"
        );
    }
    assert_eq!(s.lb.state(), ConnectivityState::TransientFailure);
}

#[test]
fn each_attempt_gets_at_least_20_seconds() {
    let mut s = pick_first();
    s.lb.update_addresses(vec![v4(1)], s.now);
    s.actions();
    assert_eq!(
        s.advance(),
        Some(20_000),
        "the attempt times out after MIN_CONNECT_TIMEOUT"
    );
    assert_eq!(s.actions(), ["disconnect 0", "resolve", "TransientFailure"]);
    // The backoff deadline (1 s) has long passed: the next attempt starts at once.
    s.advance();
    assert_eq!(s.ms(), 20_000);
    assert_eq!(s.actions(), ["connect 0 10.0.0.1:443"]);
}

#[test]
fn backoff_resets_when_settings_arrive() {
    let mut s = pick_first();
    s.lb.update_addresses(vec![v4(1)], s.now);
    s.actions();
    for _ in 0..4 {
        s.fail(0);
        s.advance();
    }
    s.actions();
    s.ready(0);
    assert_eq!(s.actions(), ["READY [0]"]);
    s.closed(0);
    assert_eq!(s.actions(), ["resolve", "Idle"]);
    s.lb.exit_idle(s.now);
    assert_eq!(s.actions(), ["Connecting", "connect 0 10.0.0.1:443"]);
    let t = s.ms();
    s.fail(0);
    s.advance();
    assert_eq!(
        s.ms() - t,
        1000,
        "back to INITIAL after a successful connection"
    );
}

#[test]
fn happy_eyeballs_starts_the_next_attempt_every_250ms_and_the_first_ready_wins() {
    let mut s = pick_first();
    s.lb.update_addresses(vec![v4(1), v4(2), v4(3)], s.now);
    assert_eq!(s.actions(), ["Connecting", "connect 0 10.0.0.1:443"]);
    assert_eq!(s.advance(), Some(250));
    assert_eq!(s.actions(), ["connect 1 10.0.0.2:443"]);
    assert_eq!(s.advance(), Some(500));
    assert_eq!(s.actions(), ["connect 2 10.0.0.3:443"]);
    s.sleep(10);
    s.ready(1);
    assert_eq!(s.actions(), ["disconnect 0", "disconnect 2", "READY [1]"]);
    s.ready(0); // a late event from a disconnected loser changes nothing
    assert_eq!(s.actions(), Vec::<String>::new());
    assert_eq!(s.lb.state(), ConnectivityState::Ready);
}

#[test]
fn a_failure_starts_the_next_attempt_at_once() {
    let mut s = pick_first();
    s.lb.update_addresses(vec![v4(1), v4(2), v4(3)], s.now);
    s.actions();
    s.sleep(100);
    s.fail(0);
    assert_eq!(
        s.actions(),
        ["connect 1 10.0.0.2:443"],
        "at 100 ms, not 250"
    );
    assert_eq!(s.advance(), Some(350), "the next one 250 ms later");
    assert_eq!(s.actions(), ["connect 2 10.0.0.3:443"]);
}

#[test]
fn transient_failure_is_sticky_while_pick_first_keeps_reconnecting() {
    let mut s = pick_first();
    s.lb.update_addresses(vec![v4(1), v4(2)], s.now);
    s.actions();
    s.fail(0);
    s.actions();
    s.fail(1);
    assert_eq!(s.actions(), ["resolve", "TransientFailure"]);
    // Backoffs end: both reconnect, but the state stays TRANSIENT_FAILURE (no CONNECTING in between).
    s.advance();
    let a = s.actions();
    assert!(a.iter().all(|x| x.starts_with("connect")), "{a:?}");
    assert_eq!(s.lb.state(), ConnectivityState::TransientFailure);
    s.sleep(3000);
    s.actions();
    s.fail(0);
    s.fail(1);
    let a = s.actions();
    assert!(
        a.contains(&"resolve".to_owned()),
        "re-resolution after as many failures as addresses: {a:?}"
    );
    assert_eq!(s.lb.state(), ConnectivityState::TransientFailure);
    s.sleep(3000);
    let a = s.actions();
    assert_eq!(a.len(), 2, "both reconnect when their backoffs end: {a:?}");
    s.ready(1);
    assert_eq!(s.actions(), ["disconnect 0", "READY [1]"]);
}

#[test]
fn the_end_of_the_first_pass_connects_an_address_whose_backoff_ended_during_it() {
    let mut s = pick_first();
    s.lb.update_addresses(vec![v4(1), v4(2)], s.now);
    assert_eq!(s.actions(), ["Connecting", "connect 0 10.0.0.1:443"]);
    // A is refused at once; B starts at once.
    s.fail(0);
    assert_eq!(s.actions(), ["connect 1 10.0.0.2:443"]);
    // A's backoff (1 s) ends while B is still trying: A is IDLE, and nothing connects it yet (first pass).
    s.sleep(5000);
    assert_eq!(s.actions(), Vec::<String>::new());
    // B fails: the pass is over, and A (IDLE) is connected along with the sticky TRANSIENT_FAILURE.
    s.fail(1);
    let a = s.actions();
    assert_eq!(
        a,
        ["resolve", "TransientFailure", "connect 0 10.0.0.1:443"],
        "A must not stay IDLE while B is retried"
    );
    // Steady state: every address is retried after its own backoff, again and again.
    let mut connects = [0usize; 2];
    for _ in 0..20 {
        s.advance();
        for x in s.actions() {
            if let Some(rest) = x.strip_prefix("connect ") {
                let id: usize = rest[..1].parse().expect("id");
                connects[id] += 1;
                s.fail(id as u64);
            }
        }
        s.actions();
    }
    assert!(
        connects[0] >= 5 && connects[1] >= 5,
        "both addresses retried: {connects:?}"
    );
    assert_eq!(s.lb.state(), ConnectivityState::TransientFailure);
}

#[test]
fn address_families_are_interleaved() {
    let list = vec![v6(1), v6(2), v6(3), v4(1), v4(2)];
    assert_eq!(
        interleave_families(list),
        vec![v6(1), v4(1), v6(2), v4(2), v6(3)]
    );
    let list = vec![v4(1), v4(2), v6(1)];
    assert_eq!(interleave_families(list), vec![v4(1), v6(1), v4(2)]);
    let mut s = pick_first();
    s.lb.update_addresses(vec![v4(1), v4(2), v6(1)], s.now);
    s.actions();
    s.advance();
    assert_eq!(
        s.actions(),
        ["connect 1 [2001:db8::1]:443"],
        "the IPv6 address is tried second"
    );
}

#[test]
fn unix_sockets_are_a_third_family() {
    let unix = |n: u8| Address::unix(format!("/tmp/s{n}"));
    let list = vec![unix(1), unix(2), v4(1), v6(1), v4(2)];
    assert_eq!(
        interleave_families(list),
        vec![unix(1), v4(1), v6(1), unix(2), v4(2)]
    );
    let list = vec![v6(1), v6(2), v6(3), unix(1), v4(1)];
    assert_eq!(
        interleave_families(list),
        vec![v6(1), unix(1), v4(1), v6(2), v6(3)]
    );
    let mut s = pick_first();
    s.lb.update_addresses(vec![unix(1), v4(1)], s.now);
    assert_eq!(s.actions(), ["Connecting", "connect 0 unix:/tmp/s1"]);
    s.ready(0);
    assert_eq!(s.actions(), ["READY [0]"]);
}

#[test]
fn shuffle_address_list_shuffles() {
    let addrs: Vec<Address> = (1..=8).map(v4).collect();
    let mut s = Sim::new(PolicyConfig::PickFirst {
        shuffle_address_list: true,
    });
    s.lb.update_addresses(addrs.clone(), s.now);
    let mut order: Vec<Address> = s.lb.subchannels().into_iter().map(|(_, a, _)| a).collect();
    let first = s.actions();
    assert_ne!(
        first[1],
        "connect 0 10.0.0.1:443".to_owned(),
        "seed 7 moves the first address: {first:?}"
    );
    order.sort();
    assert_eq!(order, addrs, "every address is still there");
}

#[test]
fn an_update_keeps_the_connection_whose_address_stays() {
    let mut s = pick_first();
    s.lb.update_addresses(vec![v4(1), v4(2)], s.now);
    s.actions();
    s.ready(0);
    s.actions();
    s.lb.update_addresses(vec![v4(3), v4(1)], s.now);
    assert_eq!(
        s.actions(),
        ["READY [0]"],
        "the chosen one is kept (the loser was already disconnected)"
    );
    s.lb.update_addresses(vec![v4(4)], s.now);
    assert_eq!(
        s.actions(),
        ["disconnect 0", "Connecting", "connect 3 10.0.0.4:443"]
    );
}

#[test]
fn a_lost_connection_makes_pick_first_idle_until_a_call_comes() {
    let mut s = pick_first();
    s.lb.update_addresses(vec![v4(1)], s.now);
    s.actions();
    s.ready(0);
    s.actions();
    s.closed(0);
    assert_eq!(s.actions(), ["resolve", "Idle"]);
    assert_eq!(s.lb.poll_timeout(), None, "no reconnection by itself");
    s.lb.exit_idle(s.now);
    assert_eq!(s.actions(), ["Connecting", "connect 0 10.0.0.1:443"]);
}

fn round_robin() -> Sim {
    Sim::new(PolicyConfig::RoundRobin)
}

#[test]
fn round_robin_connects_to_every_backend_and_picks_the_ready_ones() {
    let mut s = round_robin();
    s.lb.update_addresses(vec![v4(1), v4(2), v4(3)], s.now);
    assert_eq!(
        s.actions(),
        [
            "connect 0 10.0.0.1:443",
            "connect 1 10.0.0.2:443",
            "connect 2 10.0.0.3:443",
            "Connecting"
        ]
    );
    s.ready(2);
    assert_eq!(s.actions(), ["READY [2]"]);
    s.ready(0);
    assert_eq!(s.actions(), ["READY [0,2]"]);
    s.fail(1);
    assert_eq!(
        s.actions(),
        ["resolve"],
        "still READY with the same backends: no new picker"
    );
}

#[test]
fn round_robin_aggregate_state() {
    let mut s = round_robin();
    s.lb.update_addresses(vec![v4(1), v4(2)], s.now);
    s.actions();
    s.fail(0);
    assert_eq!(s.actions(), ["resolve"], "one still connecting: CONNECTING");
    s.fail(1);
    assert_eq!(s.actions(), ["resolve", "TransientFailure"]);
    // Reconnecting after backoff still counts as TRANSIENT_FAILURE (sticky children).
    s.advance();
    let a = s.actions();
    assert!(a.iter().all(|x| x.starts_with("connect")), "{a:?}");
    assert_eq!(s.lb.state(), ConnectivityState::TransientFailure);
    s.ready(1);
    assert_eq!(s.actions(), ["READY [1]"]);
    // A lost connection is not a failure: the backend reconnects and counts as CONNECTING.
    s.closed(1);
    assert_eq!(
        s.actions(),
        ["resolve", "connect 1 10.0.0.2:443", "Connecting"]
    );
}

#[test]
fn round_robin_update_keeps_subchannels_whose_address_stays() {
    let mut s = round_robin();
    s.lb.update_addresses(vec![v4(1), v4(2)], s.now);
    s.actions();
    s.ready(0);
    s.ready(1);
    s.actions();
    s.lb.update_addresses(vec![v4(2), v4(3)], s.now);
    assert_eq!(
        s.actions(),
        ["disconnect 0", "connect 2 10.0.0.3:443", "READY [1]"]
    );
    let ids: Vec<u64> = s.lb.subchannels().iter().map(|(id, _, _)| id.0).collect();
    assert_eq!(ids, [1, 2]);
}

#[test]
fn no_addresses_is_transient_failure() {
    let mut s = round_robin();
    s.lb.update_addresses(vec![], s.now);
    assert_eq!(s.actions(), ["TransientFailure"]);
    let mut p = pick_first();
    p.lb.update_addresses(vec![], p.now);
    assert_eq!(p.actions(), ["TransientFailure"]);
}

#[test]
fn round_robin_stops_picking_an_ejected_backend_and_keeps_its_connection() {
    let mut s = round_robin();
    s.lb.update_addresses(vec![v4(1), v4(2), v4(3)], s.now);
    s.actions();
    s.ready(0);
    s.ready(1);
    s.ready(2);
    assert_eq!(s.actions(), ["READY [0]", "READY [0,1]", "READY [0,1,2]"]);
    s.lb.eject(&v4(2), s.now);
    assert_eq!(s.actions(), ["READY [0,2]"], "no disconnect: it stays open");
    assert!(s.lb.is_ejected(&v4(2)));
    assert_eq!(
        s.lb.subchannel_state(SubchannelId(1)),
        ConnectivityState::TransientFailure
    );
    s.lb.eject(&v4(2), s.now);
    assert_eq!(s.actions(), Vec::<String>::new(), "ejected already");
    // What happens to it meanwhile is hidden: no new picker when it reconnects.
    s.closed(1);
    assert_eq!(s.actions(), ["resolve", "connect 1 10.0.0.2:443"]);
    s.ready(1);
    assert_eq!(s.actions(), Vec::<String>::new());
    s.lb.uneject(&v4(2), s.now);
    assert_eq!(s.actions(), ["READY [0,1,2]"], "back with its real state");
    assert!(!s.lb.is_ejected(&v4(2)));
}

#[test]
fn round_robin_with_every_backend_ejected_is_transient_failure() {
    let mut s = round_robin();
    s.lb.update_addresses(vec![v4(1), v4(2)], s.now);
    s.actions();
    s.ready(0);
    s.ready(1);
    s.actions();
    s.lb.eject(&v4(1), s.now);
    s.lb.eject(&v4(2), s.now);
    assert_eq!(s.actions(), ["READY [1]", "TransientFailure"]);
    s.lb.uneject(&v4(1), s.now);
    assert_eq!(s.actions(), ["READY [0]"]);
}

#[test]
fn an_address_ejected_before_its_subchannel_exists_starts_ejected() {
    let mut s = round_robin();
    s.lb.eject(&v4(2), s.now);
    s.lb.update_addresses(vec![v4(1), v4(2)], s.now);
    s.actions();
    s.ready(1);
    assert_eq!(s.actions(), Vec::<String>::new(), "ejected: not picked");
    s.ready(0);
    assert_eq!(s.actions(), ["READY [0]"]);
}

#[test]
fn pick_first_treats_its_ejected_selection_as_lost_but_keeps_the_connection() {
    let mut s = pick_first();
    s.lb.update_addresses(vec![v4(1), v4(2)], s.now);
    s.actions();
    s.ready(0);
    assert_eq!(s.actions(), ["READY [0]"]);
    s.lb.eject(&v4(1), s.now);
    assert_eq!(s.actions(), ["resolve", "Idle"], "no disconnect");
    // The next call starts a pass: the ejected address counts as failed, the next one connects.
    s.lb.exit_idle(s.now);
    assert_eq!(s.actions(), ["Connecting", "connect 1 10.0.0.2:443"]);
    s.ready(1);
    assert_eq!(s.actions(), ["disconnect 0", "READY [1]"]);
}

#[test]
fn pick_first_selects_a_ready_backend_that_returns_from_ejection() {
    let mut s = pick_first();
    s.lb.update_addresses(vec![v4(1)], s.now);
    s.actions();
    s.ready(0);
    s.actions();
    s.lb.eject(&v4(1), s.now);
    s.actions();
    s.lb.exit_idle(s.now);
    assert_eq!(s.actions(), ["Connecting", "resolve", "TransientFailure"]);
    s.lb.uneject(&v4(1), s.now);
    assert_eq!(s.actions(), ["READY [0]"]);
}

/// round_robin with health checking on and three READY backends, all SERVING.
fn health_checked_round_robin() -> Sim {
    let mut s = round_robin();
    s.lb.set_health_checking(true, s.now);
    assert!(s.lb.health_checking());
    s.lb.update_addresses(vec![v4(1), v4(2), v4(3)], s.now);
    s.actions();
    for id in 0..3 {
        s.ready(id);
    }
    assert_eq!(
        s.actions(),
        Vec::<String>::new(),
        "READY but health unknown"
    );
    for n in 1..=3 {
        s.lb.set_health(&v4(n), Health::Serving, s.now);
    }
    assert_eq!(s.actions(), ["READY [0]", "READY [0,1]", "READY [0,1,2]"]);
    s
}

#[test]
fn round_robin_skips_a_not_serving_backend_and_keeps_its_connection() {
    let mut s = health_checked_round_robin();
    s.lb.set_health(&v4(2), Health::NotServing, s.now);
    assert_eq!(s.actions(), ["READY [0,2]"], "no disconnect: it stays open");
    assert_eq!(s.lb.health(&v4(2)), Some(Health::NotServing));
    assert_eq!(
        s.lb.subchannel_state(SubchannelId(1)),
        ConnectivityState::TransientFailure
    );
    s.lb.set_health(&v4(2), Health::NotServing, s.now);
    assert_eq!(s.actions(), Vec::<String>::new(), "no change");
    s.lb.set_health(&v4(2), Health::Serving, s.now);
    assert_eq!(s.actions(), ["READY [0,1,2]"], "picked again");
    assert_eq!(
        s.lb.subchannel_state(SubchannelId(1)),
        ConnectivityState::Ready
    );
}

#[test]
fn a_ready_subchannel_whose_health_is_unknown_is_not_picked() {
    let mut s = round_robin();
    s.lb.set_health_checking(true, s.now);
    s.lb.update_addresses(vec![v4(1), v4(2)], s.now);
    s.actions();
    s.ready(0);
    assert_eq!(s.actions(), Vec::<String>::new(), "still CONNECTING");
    assert_eq!(s.lb.state(), ConnectivityState::Connecting);
    assert_eq!(s.lb.health(&v4(1)), Some(Health::Unknown));
    assert_eq!(
        s.lb.subchannel_state(SubchannelId(0)),
        ConnectivityState::Connecting
    );
    s.lb.set_health(&v4(1), Health::Serving, s.now);
    assert_eq!(s.actions(), ["READY [0]"]);
    // A new Watch (after a failed one) reports Unknown again: CONNECTING, not picked.
    s.lb.set_health(&v4(1), Health::Unknown, s.now);
    assert_eq!(s.actions(), ["Connecting"]);
}

#[test]
fn round_robin_with_every_backend_not_serving_is_transient_failure() {
    let mut s = health_checked_round_robin();
    for n in 1..=3 {
        s.lb.set_health(&v4(n), Health::NotServing, s.now);
    }
    assert_eq!(
        s.actions(),
        ["READY [1,2]", "READY [2]", "TransientFailure"]
    );
    s.lb.set_health(&v4(3), Health::Serving, s.now);
    assert_eq!(s.actions(), ["READY [2]"]);
}

#[test]
fn the_failing_picker_names_the_health_check() {
    let mut s = round_robin();
    s.lb.set_health_checking(true, s.now);
    s.lb.update_addresses(vec![v4(1)], s.now);
    s.actions();
    s.ready(0);
    s.lb.set_health(&v4(1), Health::NotServing, s.now);
    let last = std::iter::from_fn(|| s.lb.poll_action()).last();
    match last {
        Some(LbAction::UpdatePicker {
            state: ConnectivityState::TransientFailure,
            picker: PickerSpec::Fail(message),
        }) => assert!(
            message.starts_with("no address is usable")
                && message.contains("10.0.0.1:443: health check"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_failing_picker_names_the_ejection() {
    let mut s = round_robin();
    s.lb.update_addresses(vec![v4(1)], s.now);
    s.actions();
    s.ready(0);
    s.lb.eject(&v4(1), s.now);
    let last = std::iter::from_fn(|| s.lb.poll_action()).last();
    match last {
        Some(LbAction::UpdatePicker {
            state: ConnectivityState::TransientFailure,
            picker: PickerSpec::Fail(message),
        }) => assert!(
            message.starts_with("no address is usable")
                && message.contains("10.0.0.1:443: ejected by outlier detection"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_reconnect_resets_health_to_unknown() {
    let mut s = health_checked_round_robin();
    s.closed(1);
    assert_eq!(
        s.actions(),
        ["resolve", "connect 1 10.0.0.2:443", "READY [0,2]"]
    );
    assert_eq!(s.lb.health(&v4(2)), Some(Health::Unknown));
    // A late answer from the lost connection is ignored: the subchannel is not READY.
    s.lb.set_health(&v4(2), Health::Serving, s.now);
    assert_eq!(s.actions(), Vec::<String>::new());
    assert_eq!(s.lb.health(&v4(2)), Some(Health::Unknown));
    s.ready(1);
    assert_eq!(
        s.actions(),
        Vec::<String>::new(),
        "new connection: awaits its Watch"
    );
    s.lb.set_health(&v4(2), Health::Serving, s.now);
    assert_eq!(s.actions(), ["READY [0,1,2]"]);
}

#[test]
fn ejection_wins_over_health() {
    let mut s = health_checked_round_robin();
    s.lb.eject(&v4(2), s.now);
    assert_eq!(s.actions(), ["READY [0,2]"]);
    s.lb.set_health(&v4(2), Health::NotServing, s.now);
    s.lb.set_health(&v4(2), Health::Serving, s.now);
    assert_eq!(s.actions(), Vec::<String>::new(), "ejected: health hidden");
    s.lb.set_health(&v4(2), Health::NotServing, s.now);
    s.lb.uneject(&v4(2), s.now);
    assert_eq!(s.actions(), Vec::<String>::new(), "back, but NOT_SERVING");
    assert_eq!(
        s.lb.subchannel_state(SubchannelId(1)),
        ConnectivityState::TransientFailure
    );
    s.lb.set_health(&v4(2), Health::Serving, s.now);
    assert_eq!(s.actions(), ["READY [0,1,2]"]);
}

#[test]
fn turning_health_checking_off_shows_the_real_states() {
    let mut s = health_checked_round_robin();
    s.lb.set_health(&v4(1), Health::NotServing, s.now);
    assert_eq!(s.actions(), ["READY [1,2]"]);
    s.lb.set_health_checking(false, s.now);
    assert!(!s.lb.health_checking());
    assert_eq!(s.actions(), ["READY [0,1,2]"]);
    s.lb.set_health_checking(true, s.now);
    assert_eq!(s.actions(), ["READY [1,2]"]);
}

#[test]
fn round_robin_without_health_checking_ignores_health() {
    let mut s = round_robin();
    assert!(!s.lb.health_checking(), "off by default");
    s.lb.update_addresses(vec![v4(1)], s.now);
    s.actions();
    s.ready(0);
    assert_eq!(s.actions(), ["READY [0]"]);
    s.lb.set_health(&v4(1), Health::NotServing, s.now);
    assert_eq!(s.actions(), Vec::<String>::new());
}

#[test]
fn pick_first_is_unaffected_by_health() {
    let mut s = pick_first();
    s.lb.set_health_checking(true, s.now);
    assert!(
        !s.lb.health_checking(),
        "a top-level pick_first never health checks"
    );
    s.lb.update_addresses(vec![v4(1), v4(2)], s.now);
    s.actions();
    s.ready(0);
    assert_eq!(s.actions(), ["READY [0]"], "no wait for a health answer");
    s.lb.set_health(&v4(1), Health::NotServing, s.now);
    assert_eq!(s.actions(), Vec::<String>::new());
    assert_eq!(
        s.lb.subchannel_state(SubchannelId(0)),
        ConnectivityState::Ready
    );
    assert_eq!(s.lb.state(), ConnectivityState::Ready);
}
