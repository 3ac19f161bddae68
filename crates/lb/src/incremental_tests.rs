//! Property tests of the incremental bookkeeping that keeps each policy's work per event from growing with
//! the endpoints: each policy is driven by a seeded random sequence of events (address and cluster updates
//! with duplicates and shared addresses, connection results, timers, ejections, health answers, picks), and
//! after every event what it counts and publishes is compared with a recomputation from scratch over every
//! subchannel:
//!
//! * the registry's per-state counts equal a count of the subchannels' states;
//! * round_robin's published state is the aggregate (READY, else CONNECTING, else IDLE, else
//!   TRANSIENT_FAILURE) of its backends' states as the policy sees them (ejection, then sticky
//!   TRANSIENT_FAILURE, then health), and its READY picker lists exactly the READY (and serving) backends, in
//!   address order;
//! * an xDS ring_hash picker shows each endpoint's current state, a round_robin cluster's picker lists only
//!   READY subchannels and every READY backend of its READY localities, and the channel is READY whenever a
//!   cluster's picker can pick.
//!
//! Plus the timer cases the deadline-ordered set must get right: equal deadlines, a removed subchannel's
//! timer, and a subchannel that changed twice between two looks of its policy.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use grpc_base::{Address, Rng, SplitMix64};

use crate::action::{LbAction, TimerEvent};
use crate::backoff::BackoffConfig;
use crate::health::Health;
use crate::pick::{PickRequest, PickResult};
use crate::picker::{Picker, PickerSpec};
use crate::round_robin::RoundRobin;
use crate::state::ConnectivityState;
use crate::state::SubchannelId;
use crate::subchannel::Subchannels;
use crate::xds_clusters::XdsClusters;
use crate::{
    ClusterConfig, ClusterLbConfig, ClusterPick, LocalityConfig, PriorityConfig, XdsClustersConfig,
};

use ConnectivityState::{Connecting, Idle, Ready, TransientFailure};

fn addr(n: u64) -> Address {
    Address::Tcp(SocketAddr::from(([10, 0, 1, n as u8], 443)))
}

fn subs(seed: u64) -> Subchannels {
    Subchannels::new(BackoffConfig::default(), Box::new(SplitMix64::new(seed)))
}

fn below(rng: &mut SplitMix64, n: u64) -> u64 {
    rng.next_u64() % n.max(1)
}

fn one_of(rng: &mut SplitMix64, ids: &[SubchannelId]) -> Option<SubchannelId> {
    (!ids.is_empty()).then(|| ids[below(rng, ids.len() as u64) as usize])
}

fn ids_in(subs: &Subchannels, state: ConnectivityState) -> Vec<SubchannelId> {
    subs.iter()
        .filter(|s| s.state == state)
        .map(|s| s.id)
        .collect()
}

/// The registry's counts against a count of every subchannel.
fn check_counts(subs: &Subchannels) -> Result<(), String> {
    for state in [Idle, Connecting, Ready, TransientFailure] {
        let naive = subs.iter().filter(|s| s.state == state).count();
        if subs.count(state) != naive {
            return Err(format!(
                "count of {state:?}: {} kept, {naive} recounted",
                subs.count(state)
            ));
        }
    }
    Ok(())
}

/// A backend's state as round_robin must see it, from its fields (not from the policy's code).
fn naive_state(subs: &Subchannels, id: SubchannelId) -> ConnectivityState {
    let Some(s) = subs.get(id) else {
        return ConnectivityState::Shutdown;
    };
    if subs.is_ejected(id) {
        return TransientFailure;
    }
    if s.failed_since_ready && s.state != Ready {
        return TransientFailure;
    }
    if subs.health_checking() && s.state == Ready {
        return match s.health {
            Health::Serving => Ready,
            Health::Unknown => Connecting,
            Health::NotServing => TransientFailure,
        };
    }
    s.state
}

/// The last picker of the actions, which it drains.
fn drain(subs: &mut Subchannels, last: &mut Option<(ConnectivityState, PickerSpec)>) {
    while let Some(a) = subs.out.pop_front() {
        if let LbAction::UpdatePicker { state, picker } = a {
            *last = Some((state, picker));
        }
    }
}

/// One random round_robin event; returns its description. A new address list goes to `list` (its
/// backends, in order, without duplicates).
fn rr_event(
    rr: &mut RoundRobin,
    rng: &mut SplitMix64,
    now: &mut Instant,
    pool: u64,
    list: &mut Vec<SubchannelId>,
) -> String {
    match below(rng, 100) {
        0..=3 => {
            let n = below(rng, 9);
            let addresses: Vec<Address> = (0..n).map(|_| addr(1 + below(rng, pool))).collect();
            let d = format!("update {addresses:?}");
            rr.update(addresses.iter().map(|a| vec![a.clone()]).collect(), *now);
            list.clear();
            for a in &addresses {
                if let Some(id) = rr.subs.find(a) {
                    if !list.contains(&id) {
                        list.push(id);
                    }
                }
            }
            d
        }
        4..=30 => match one_of(rng, &ids_in(&rr.subs, Connecting)) {
            Some(id) => {
                rr.subchannel_ready(id, *now);
                format!("ready {}", id.0)
            }
            None => "nothing".into(),
        },
        31..=45 => match one_of(rng, &ids_in(&rr.subs, Connecting)) {
            Some(id) => {
                rr.subchannel_failed(id, "refused".into(), *now);
                format!("failed {}", id.0)
            }
            None => "nothing".into(),
        },
        46..=53 => match one_of(rng, &ids_in(&rr.subs, Ready)) {
            Some(id) => {
                rr.subchannel_closed(id, *now);
                format!("closed {}", id.0)
            }
            None => "nothing".into(),
        },
        54..=65 => {
            if let Some(at) = rr.poll_timeout() {
                *now = at.max(*now);
            }
            rr.handle_timeout(*now);
            "timer".into()
        }
        66..=69 => {
            *now += Duration::from_millis(below(rng, 25_000));
            rr.handle_timeout(*now);
            "sleep".into()
        }
        70..=77 => {
            let a = addr(1 + below(rng, pool));
            let eject = below(rng, 2) == 0;
            if rr.subs.set_ejected(&a, eject) {
                rr.ejection_changed(&a, *now);
            }
            format!("ejected {a} {eject}")
        }
        78..=80 => {
            let on = below(rng, 3) != 0;
            if rr.subs.set_health_checking(on) {
                rr.health_changed();
            }
            format!("health checking {on}")
        }
        81..=95 => {
            let a = addr(1 + below(rng, pool));
            let h = [Health::Serving, Health::NotServing, Health::Unknown][below(rng, 3) as usize];
            if rr.subs.set_health(&a, h) {
                rr.health_changed();
            }
            format!("health {a} {h:?}")
        }
        _ => {
            rr.exit_idle(*now);
            "exit idle".into()
        }
    }
}

/// After every round_robin event: counts, state and picker against a recomputation from scratch.
fn rr_check(
    rr: &RoundRobin,
    list: &[SubchannelId],
    last: &Option<(ConnectivityState, PickerSpec)>,
) -> Result<(), String> {
    check_counts(&rr.subs)?;
    let states: Vec<ConnectivityState> = list.iter().map(|id| naive_state(&rr.subs, *id)).collect();
    let want = ConnectivityState::aggregate(states.iter().copied());
    let Some((state, picker)) = last else {
        return Err("no picker published".into());
    };
    if *state != want || rr.state() != want {
        return Err(format!(
            "published {state:?}, recomputed {want:?} from {states:?}"
        ));
    }
    match (want, picker) {
        (Ready, PickerSpec::Ready(picked)) => {
            let ready: Vec<SubchannelId> = list
                .iter()
                .zip(&states)
                .filter(|(_, s)| **s == Ready)
                .map(|(id, _)| *id)
                .collect();
            let picked: Vec<SubchannelId> = picked.iter().map(|(id, _)| *id).collect();
            if picked != ready {
                return Err(format!("picker lists {picked:?}, READY are {ready:?}"));
            }
        }
        (TransientFailure, PickerSpec::Fail(_)) | (Connecting | Idle, PickerSpec::Queue) => {}
        (want, picker) => return Err(format!("{want:?} published with {picker:?}")),
    }
    Ok(())
}

#[test]
fn round_robin_random_events_agree_with_a_recount_from_scratch() {
    for seed in 0..400u64 {
        let mut rng = SplitMix64::new(seed);
        let pool = 3 + seed % 10;
        let mut rr = RoundRobin::new(subs(seed));
        let mut now = Instant::now();
        let mut last = None;
        let mut trace = Vec::new();
        let mut list: Vec<SubchannelId> = Vec::new();
        for step in 0..400 {
            let event = rr_event(&mut rr, &mut rng, &mut now, pool, &mut list);
            trace.push(event);
            drain(&mut rr.subs, &mut last);
            if last.is_none() {
                continue;
            }
            if let Err(e) = rr_check(&rr, &list, &last) {
                let tail: Vec<&String> = trace.iter().rev().take(12).rev().collect();
                panic!("seed {seed} step {step}: {e}\nlast events: {tail:#?}");
            }
        }
    }
}

/// A subchannel that goes READY → IDLE → CONNECTING → READY between two looks of round_robin is still in
/// its picker, and the aggregate is still READY.
#[test]
fn round_robin_backend_changed_twice_between_looks_stays_in_the_picker() {
    let now = Instant::now();
    let mut rr = RoundRobin::new(subs(1));
    rr.update(vec![vec![addr(1)], vec![addr(2)]], now);
    let ids: Vec<SubchannelId> = rr.subs.ids().collect();
    for id in &ids {
        rr.subchannel_ready(*id, now);
    }
    let mut last = None;
    drain(&mut rr.subs, &mut last);
    assert!(
        matches!(&last, Some((Ready, PickerSpec::Ready(l))) if l.len() == 2),
        "{last:?}"
    );
    // Behind the policy's back: lost, reconnecting, READY again.
    assert!(rr.subs.closed(ids[0]));
    assert!(rr.subs.connect(ids[0], now));
    assert!(rr.subs.ready(ids[0]));
    rr.health_changed();
    drain(&mut rr.subs, &mut last);
    assert!(
        matches!(&last, Some((Ready, PickerSpec::Ready(l))) if l.len() == 2),
        "{last:?}"
    );
    // And READY → failed → READY with health checking: Unknown until it answers.
    assert!(rr.subs.set_health_checking(true));
    rr.health_changed();
    drain(&mut rr.subs, &mut last);
    assert_eq!(last.as_ref().map(|l| l.0), Some(Connecting));
    assert!(rr.subs.set_health(&addr(2), Health::Serving));
    rr.health_changed();
    drain(&mut rr.subs, &mut last);
    assert!(
        matches!(&last, Some((Ready, PickerSpec::Ready(l))) if l == &vec![(ids[1], addr(2))]),
        "{last:?}"
    );
}

/// The connection attempts among the actions, which it drains (the last picker goes to `last`).
fn connects(
    subs: &mut Subchannels,
    last: &mut Option<(ConnectivityState, PickerSpec)>,
) -> Vec<Address> {
    let mut out = Vec::new();
    while let Some(a) = subs.out.pop_front() {
        match a {
            LbAction::Connect { addr, .. } => out.push(addr),
            LbAction::UpdatePicker { state, picker } => *last = Some((state, picker)),
            _ => {}
        }
    }
    out
}

/// A61: round_robin balances over endpoints. A two-address endpoint is one backend that connects its first
/// address, after a failure its next, and whose READY address takes its picks; a failed address's backoff
/// ending does not reconnect it while another address serves the endpoint.
#[test]
fn round_robin_uses_an_endpoints_addresses_in_order() {
    let now = Instant::now();
    let mut rr = RoundRobin::new(subs(3));
    rr.update(vec![vec![addr(1), addr(2)], vec![addr(3)]], now);
    let mut last = None;
    assert_eq!(connects(&mut rr.subs, &mut last), [addr(1), addr(3)]);
    let id = |rr: &RoundRobin, n| rr.subs.find(&addr(n)).expect("a subchannel");
    // The first address fails: the endpoint goes on to its second.
    rr.subchannel_failed(id(&rr, 1), "refused".into(), now);
    assert_eq!(connects(&mut rr.subs, &mut last), [addr(2)]);
    rr.subchannel_ready(id(&rr, 2), now);
    rr.subchannel_ready(id(&rr, 3), now);
    connects(&mut rr.subs, &mut last);
    assert_eq!(
        last,
        Some((
            Ready,
            PickerSpec::Ready(vec![(id(&rr, 2), addr(2)), (id(&rr, 3), addr(3))])
        ))
    );
    // The first address's backoff ends: it stays idle while the second serves the endpoint.
    let later = now + Duration::from_secs(300);
    rr.handle_timeout(later);
    assert_eq!(connects(&mut rr.subs, &mut last), Vec::<Address>::new());
    assert_eq!(rr.subs.real_state(id(&rr, 1)), Idle);
    // A new list with the same endpoints keeps the READY address in use.
    rr.update(vec![vec![addr(1), addr(2)], vec![addr(3)]], later);
    assert_eq!(connects(&mut rr.subs, &mut last), Vec::<Address>::new());
    assert!(
        matches!(&last, Some((Ready, PickerSpec::Ready(l))) if l.len() == 2),
        "{last:?}"
    );
}

/// Two subchannels whose attempts share a deadline both time out (the timer set is keyed by deadline and
/// id), and a removed subchannel's timer neither fires nor is polled.
#[test]
fn equal_deadlines_both_fire_and_a_removed_subchannels_timer_is_gone() {
    let now = Instant::now();
    let mut s = subs(3);
    let a = s.find_or_add(&addr(1));
    let b = s.find_or_add(&addr(2));
    let c = s.find_or_add(&addr(3));
    for id in [a, b, c] {
        assert!(s.connect(id, now));
    }
    let deadline = |s: &Subchannels, id| {
        s.out.iter().find_map(|act| match act {
            LbAction::Connect {
                id: i, deadline, ..
            } if *i == id => Some(*deadline),
            _ => None,
        })
    };
    let (da, db, dc) = (deadline(&s, a), deadline(&s, b), deadline(&s, c));
    assert_eq!(da, db, "the first attempts share their deadline (20 s)");
    assert_eq!(da, dc);
    let at = da.expect("a deadline");
    s.out.clear();
    s.remove(c);
    assert_eq!(s.poll_timeout(), Some(at));
    let fired = s.handle_timeout(at);
    assert_eq!(fired.len(), 2, "{fired:?}");
    assert_eq!(s.real_state(a), TransientFailure);
    assert_eq!(s.real_state(b), TransientFailure);
    check_counts(&s).expect("counts");
    // Their backoffs (about 1 s from the attempts' start) are over at once: due at the same instant.
    assert_eq!(s.poll_timeout(), Some(at));
    // a goes in TRANSIENT_FAILURE: its backoff timer goes with it.
    s.remove(a);
    let fired = s.handle_timeout(at);
    assert_eq!(fired, vec![TimerEvent::BackoffOver(b)]);
    assert_eq!(s.poll_timeout(), None);
    assert!(s.handle_timeout(at + Duration::from_secs(3600)).is_empty());
    check_counts(&s).expect("counts");
}

// ---- xDS ----

fn random_config(rng: &mut SplitMix64, pool: u64, ring_percent: u64) -> XdsClustersConfig {
    let mut clusters = BTreeMap::new();
    for name in ["a", "b", "c"].iter().take(1 + below(rng, 3) as usize) {
        let mut priorities = Vec::new();
        for _ in 0..1 + below(rng, 3) {
            let mut localities = Vec::new();
            for l in 0..1 + below(rng, 2) {
                let addresses = (0..1 + below(rng, 4))
                    .map(|_| addr(1 + below(rng, pool)))
                    .collect();
                localities.push(LocalityConfig {
                    // Distinct names within a priority (the resolver's promise).
                    name: format!("l{}", 2 * l + below(rng, 2)),
                    weight: NonZeroU32::new(1 + below(rng, 3) as u32).unwrap_or(NonZeroU32::MIN),
                    addresses,
                    endpoint_weights: Vec::new(),
                });
            }
            priorities.push(PriorityConfig { localities });
        }
        let mut c = ClusterConfig::new(priorities);
        if below(rng, 100) < ring_percent {
            c.lb = ClusterLbConfig::RingHash {
                min_ring_size: 8,
                max_ring_size: 64,
            };
        }
        clusters.insert((*name).to_owned(), c);
    }
    XdsClustersConfig { clusters }
}

/// After every xDS event: counts, and the pickers against the subchannels' current states. One lag is
/// allowed, as before the incremental bookkeeping: a ring refreshed before a later child (another
/// cluster's, or a priority created later in the same refresh) connected one of its IDLE endpoints shows
/// it IDLE until the next refresh; those go to `lagging`, and must not still lag after a refresh.
fn xds_check(
    x: &XdsClusters,
    last: &Option<(ConnectivityState, PickerSpec)>,
    lagging: &mut Vec<SubchannelId>,
    refreshed: bool,
) -> Result<(), String> {
    check_counts(&x.subs)?;
    let before = std::mem::take(lagging);
    let Some((state, PickerSpec::Clusters(clusters))) = last else {
        return Ok(());
    };
    let mut can_pick = false;
    for (name, c) in clusters {
        match &c.state {
            ClusterPick::Ring(ring) => {
                for (id, a, shown) in ring.endpoints() {
                    let now = naive_state(&x.subs, *id);
                    let lag = *shown == Idle && now == Connecting;
                    if lag && !(refreshed && before.contains(id)) {
                        lagging.push(*id);
                    } else if *shown != now {
                        return Err(format!(
                            "cluster {name}: ring picker shows {a} (subchannel {}) {shown:?}, it is {now:?}",
                            id.0
                        ));
                    }
                    can_pick |= now == Ready;
                }
            }
            ClusterPick::Ready(localities) => {
                for l in localities {
                    for (id, a) in &l.subchannels {
                        let now = naive_state(&x.subs, *id);
                        if now != Ready {
                            return Err(format!(
                                "cluster {name}: picker lists {a} (subchannel {}), which is {now:?}",
                                id.0
                            ));
                        }
                        can_pick = true;
                    }
                }
            }
            _ => {}
        }
    }
    if can_pick && *state != Ready {
        return Err(format!("a cluster can pick, yet the channel is {state:?}"));
    }
    Ok(())
}

/// One random xDS event: its description, and whether the policy refreshed.
fn xds_event(
    x: &mut XdsClusters,
    rng: &mut SplitMix64,
    now: &mut Instant,
    pool: u64,
    ring_percent: u64,
    last: &Option<(ConnectivityState, PickerSpec)>,
) -> (String, bool) {
    let mut refreshed = true;
    let d = match below(rng, 100) {
        0..=2 => {
            let config = random_config(rng, pool, ring_percent);
            let d = format!("config {config:?}");
            x.update_clusters(config, *now);
            d
        }
        3..=27 => match one_of(rng, &ids_in(&x.subs, Connecting)) {
            Some(id) => {
                x.subchannel_ready(id, *now);
                format!("ready {}", id.0)
            }
            None => {
                refreshed = false;
                "nothing".into()
            }
        },
        28..=42 => match one_of(rng, &ids_in(&x.subs, Connecting)) {
            Some(id) => {
                x.subchannel_failed(id, "refused".into(), *now);
                format!("failed {}", id.0)
            }
            None => {
                refreshed = false;
                "nothing".into()
            }
        },
        43..=50 => match one_of(rng, &ids_in(&x.subs, Ready)) {
            Some(id) => {
                x.subchannel_closed(id, *now);
                format!("closed {}", id.0)
            }
            None => {
                refreshed = false;
                "nothing".into()
            }
        },
        51..=62 => {
            if let Some(at) = x.poll_timeout() {
                *now = at.max(*now);
            }
            x.handle_timeout(*now);
            "timer".into()
        }
        63..=66 => {
            let ms = if below(rng, 8) == 0 {
                16 * 60 * 1000
            } else {
                below(rng, 12_000)
            };
            *now += Duration::from_millis(ms);
            x.handle_timeout(*now);
            format!("sleep {ms} ms")
        }
        67..=74 => {
            let a = addr(1 + below(rng, pool));
            let eject = below(rng, 2) == 0;
            refreshed = x.subs.set_ejected(&a, eject);
            if refreshed {
                x.ejection_changed(&a, *now);
            }
            format!("ejected {a} {eject}")
        }
        75..=79 => {
            x.exit_idle(*now);
            "exit idle".into()
        }
        _ => {
            let cluster = ["a", "b", "c"][below(rng, 3) as usize];
            let hash = rng.next_u64();
            refreshed = false;
            if let Some((_, spec)) = last {
                let picker: Picker<SubchannelId> = Picker::new(spec, Some, 0);
                let request = PickRequest {
                    cluster: Some(cluster),
                    hash: Some(hash),
                    ..PickRequest::default()
                };
                if let PickResult::Queue { exit_idle: true } = picker.pick(&request) {
                    x.exit_idle(*now);
                    refreshed = true;
                }
            }
            format!("pick {cluster} {hash}")
        }
    };
    (d, refreshed)
}

fn xds_run(seeds: std::ops::Range<u64>, pool: u64, ring_percent: u64) {
    for seed in seeds {
        let mut rng = SplitMix64::new(seed);
        let mut x = XdsClusters::new(subs(seed));
        let mut now = Instant::now();
        let mut last = None;
        let mut trace = Vec::new();
        let mut lagging = Vec::new();
        let config = random_config(&mut rng, pool, ring_percent);
        trace.push(format!("config {config:?}"));
        x.update_clusters(config, now);
        let mut refreshed = true;
        for step in 0..300 {
            drain(&mut x.subs, &mut last);
            if let Err(e) = xds_check(&x, &last, &mut lagging, refreshed) {
                let tail: Vec<&String> = trace.iter().rev().take(12).rev().collect();
                panic!("seed {seed} step {step}: {e}\nlast events: {tail:#?}");
            }
            let (event, r) = xds_event(&mut x, &mut rng, &mut now, pool, ring_percent, &last);
            refreshed = r;
            trace.push(event);
        }
    }
}

#[test]
fn xds_round_robin_random_events_keep_pickers_current() {
    xds_run(0..300, 6, 0);
}

#[test]
fn xds_ring_hash_random_events_keep_pickers_current() {
    xds_run(0..300, 6, 100);
}

#[test]
fn xds_mixed_clusters_sharing_endpoints_keep_pickers_current() {
    xds_run(0..300, 4, 50);
}

/// A READY ring cannot fail a pick (a walk meets a READY, IDLE or CONNECTING entry first), so the
/// message its picker would fail with is not something picks see. Yet that message carries the channel's
/// latest connection error, so every failure of another endpoint (here: two dead endpoints of the ring,
/// TRANSIENT_FAILURE throughout, retrying as their backoffs end) changes the spec and publishes a new
/// picker of every endpoint: O(n) for the channel to rebuild per event, with nothing picks see changed.
#[test]
fn a_ready_ring_is_not_republished_for_failures_its_picks_cannot_see() {
    use crate::LbPolicy;
    let endpoint =
        |i: usize| Address::Tcp(SocketAddr::from(([10, 2, (i >> 8) as u8, i as u8], 443)));
    let n = 1000;
    let mut ring = ClusterConfig::new(vec![PriorityConfig {
        localities: vec![LocalityConfig {
            name: "l".into(),
            weight: NonZeroU32::MIN,
            addresses: (0..n).map(endpoint).collect(),
            endpoint_weights: Vec::new(),
        }],
    }]);
    ring.lb = ClusterLbConfig::RingHash {
        min_ring_size: 1024,
        max_ring_size: 4096,
    };
    let mut lb = LbPolicy::new(
        crate::PolicyConfig::XdsClusterManager,
        Box::new(SplitMix64::new(5)),
    );
    let mut now = Instant::now();
    lb.update_clusters(
        XdsClustersConfig {
            clusters: BTreeMap::from([("r".to_owned(), ring)]),
        },
        now,
    );
    lb.exit_idle(now);
    // The channel's side: endpoints 0 and 1 refuse every connection, the others accept.
    let mut published: Vec<(ConnectivityState, PickerSpec)> = Vec::new();
    let mut failures = 0;
    let run = |lb: &mut LbPolicy, now: Instant, published: &mut Vec<_>, failures: &mut usize| {
        while let Some(action) = lb.poll_action() {
            match action {
                LbAction::Connect { id, addr, .. } => {
                    if addr == endpoint(0) || addr == endpoint(1) {
                        *failures += 1;
                        lb.subchannel_failed(id, "connection refused".into(), now);
                    } else {
                        lb.subchannel_ready(id, now);
                    }
                }
                LbAction::UpdatePicker { state, picker } => published.push((state, picker)),
                LbAction::Disconnect { .. } | LbAction::ResolveNow => {}
            }
        }
    };
    run(&mut lb, now, &mut published, &mut failures);
    assert_eq!(lb.state(), Ready, "{:?}", published.last());
    assert_eq!(failures, 2);
    // Steady state: the two dead endpoints retry as their backoffs end.
    published.clear();
    failures = 0;
    for _ in 0..40 {
        let Some(at) = lb.poll_timeout() else { break };
        now = now.max(at);
        lb.handle_timeout(now);
        run(&mut lb, now, &mut published, &mut failures);
    }
    assert!(failures >= 10, "{failures} retries");
    assert_eq!(lb.state(), Ready);
    let rings: Vec<String> = published
        .iter()
        .filter_map(|(_, p)| match p {
            PickerSpec::Clusters(c) => c.get("r").map(|c| format!("{:?}", c.state)),
            _ => None,
        })
        .collect();
    let endpoints: Vec<Vec<(SubchannelId, Address, ConnectivityState)>> = published
        .iter()
        .filter_map(|(_, p)| match p {
            PickerSpec::Clusters(c) => match c.get("r").map(|c| &c.state) {
                Some(ClusterPick::Ring(r)) => Some(r.endpoints().to_vec()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert!(
        endpoints.windows(2).all(|w| w[0] == w[1]),
        "the endpoints' states changed"
    );
    let entries = published.len() * n;
    assert_eq!(
        published.len(),
        0,
        "{failures} failures of endpoints already TRANSIENT_FAILURE, nothing picks see changed, yet {} \
         pickers of {n} endpoints ({entries} entries for the channel to build) were published; they \
         differ only in the failure message: {:?}",
        published.len(),
        rings
            .iter()
            .take(2)
            .map(|r| r.split("failure: ").nth(1).unwrap_or_default())
            .collect::<Vec<_>>()
    );
}
