//! Tests of ring_hash (gRFC A42/A61): the ring's construction, and the policy and picker of a ring_hash
//! cluster under the xDS cluster manager, with an injected clock and seeded randomness.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::Instant;

use grpc_base::{Address, SplitMix64};

use crate::ring_hash::{aggregate, build_ring};
use crate::{
    xxh64, ClusterConfig, ClusterLbConfig, ClusterPick, ConnectivityState, LbAction, LbPolicy,
    LocalityConfig, PickRequest, PickResult, Picker, PickerSpec, PolicyConfig, PriorityConfig,
    SubchannelId, XdsClustersConfig,
};

use ConnectivityState::{Connecting, Idle, Ready, Shutdown, TransientFailure};

fn v4(n: u8) -> Address {
    Address::Tcp(([10, 0, 0, n], 443).into())
}

fn keys(weights: &[u64]) -> Vec<(String, u64)> {
    weights
        .iter()
        .enumerate()
        .map(|(i, w)| (format!("10.0.0.{}:443", i + 1), *w))
        .collect()
}

/// How many ring entries each endpoint has.
fn counts(ring: &[(u64, usize)], n: usize) -> Vec<usize> {
    let mut c = vec![0; n];
    for (_, e) in ring {
        c[*e] += 1;
    }
    c
}

#[test]
fn xxh64_matches_the_published_vector() {
    assert_eq!(xxh64(b""), 0xEF46_DB37_51D8_E999);
}

#[test]
fn ring_sizes_follow_the_minimum_the_weights_and_the_cap() {
    // Equal weights: scale = ceil(1024 / 3) * 3 = 1026 entries, 342 each.
    let ring = build_ring(&keys(&[1, 1, 1]), 1024, 4096);
    assert_eq!(ring.len(), 1026);
    assert_eq!(counts(&ring, 3), [342, 342, 342]);
    assert!(ring.windows(2).all(|w| w[0].0 <= w[1].0), "sorted by hash");
    // The entries are XXH64("<address>_<i>").
    assert!(ring.contains(&(xxh64(b"10.0.0.2:443_0"), 1)));
    assert!(ring.contains(&(xxh64(b"10.0.0.2:443_341"), 1)));
    assert!(!ring.iter().any(|(h, _)| *h == xxh64(b"10.0.0.2:443_342")));
    // Weights 1:2:3: entries in proportion, the lightest endpoint getting at least min / 6.
    let ring = build_ring(&keys(&[1, 2, 3]), 1024, 4096);
    let c = counts(&ring, 3);
    assert_eq!(c, [171, 342, 513], "{c:?}");
    // The maximum bounds the ring: weights 1:1000 would need 1001 × 1024 entries.
    // (The running target is a sum of floats, as in C-core and grpc-go: it may end a hair above the
    // scale, giving one more entry.)
    let ring = build_ring(&keys(&[1, 1000]), 1024, 2000);
    assert!(matches!(ring.len(), 2000 | 2001), "{}", ring.len());
    let c = counts(&ring, 2);
    assert_eq!(c[0], 2, "{c:?}");
    // Both sizes are capped at 4096, whatever the cluster says.
    let ring = build_ring(&keys(&[1, 1]), 1_000_000, 8_388_608);
    assert_eq!(ring.len(), 4096);
    // A small minimum still gives each endpoint an entry.
    let ring = build_ring(&keys(&[1, 1, 1, 1]), 1, 4);
    assert_eq!(counts(&ring, 4), [1, 1, 1, 1]);
    assert!(build_ring(&[], 1024, 4096).is_empty());
}

#[test]
fn aggregate_state_follows_the_six_rules() {
    let cases: [(&[ConnectivityState], ConnectivityState); 9] = [
        (&[TransientFailure, TransientFailure, Ready], Ready),
        (
            &[TransientFailure, TransientFailure, Connecting],
            TransientFailure,
        ),
        (&[Connecting, Idle, Idle], Connecting),
        (&[TransientFailure, Idle, Idle], Connecting),
        (&[TransientFailure], TransientFailure),
        (&[Idle, Idle], Idle),
        (&[Shutdown, TransientFailure, Idle], TransientFailure),
        (&[], TransientFailure),
        (&[Ready], Ready),
    ];
    for (states, want) in cases {
        assert_eq!(aggregate(states), want, "{states:?}");
    }
}

struct Sim {
    lb: LbPolicy,
    now: Instant,
    spec: Option<PickerSpec>,
    state: Option<ConnectivityState>,
    ids: HashMap<Address, SubchannelId>,
}

/// A ring_hash cluster "a" of one priority: locality "l1" (weight 1) with 10.0.0.1 and .2, locality "l2"
/// (weight 2) with 10.0.0.3; endpoint 10.0.0.2 weighs 3.
fn ring_cluster() -> ClusterConfig {
    let mut c = ClusterConfig::new(vec![PriorityConfig {
        localities: vec![
            LocalityConfig {
                name: "l1".into(),
                weight: NonZeroU32::MIN,
                addresses: vec![v4(1), v4(2)],
                endpoint_weights: vec![1, 3],
            },
            LocalityConfig {
                name: "l2".into(),
                weight: NonZeroU32::new(2).expect("2 > 0"),
                addresses: vec![v4(3)],
                endpoint_weights: Vec::new(),
            },
        ],
    }]);
    c.lb = ClusterLbConfig::RingHash {
        min_ring_size: 1024,
        max_ring_size: 8_388_608,
    };
    c
}

impl Sim {
    fn new() -> Sim {
        let mut lb = LbPolicy::new(
            PolicyConfig::XdsClusterManager,
            Box::new(SplitMix64::new(7)),
        );
        let now = Instant::now();
        let config = XdsClustersConfig {
            clusters: [("a".to_owned(), ring_cluster())].into(),
        };
        assert!(lb.update_clusters(config, now));
        let ids = lb
            .subchannels()
            .into_iter()
            .map(|(id, a, _)| (a, id))
            .collect();
        Sim {
            lb,
            now,
            spec: None,
            state: None,
            ids,
        }
    }

    /// The addresses connected since the last call (and the latest picker kept).
    fn connects(&mut self) -> Vec<Address> {
        let mut out = Vec::new();
        while let Some(a) = self.lb.poll_action() {
            match a {
                LbAction::Connect { addr, .. } => out.push(addr),
                LbAction::UpdatePicker { state, picker } => {
                    self.state = Some(state);
                    self.spec = Some(picker);
                }
                LbAction::Disconnect { .. } | LbAction::ResolveNow => {}
            }
        }
        out
    }

    fn ready(&mut self, n: u8) {
        self.lb.subchannel_ready(self.ids[&v4(n)], self.now);
    }

    fn fail(&mut self, n: u8) {
        self.lb
            .subchannel_failed(self.ids[&v4(n)], "refused".into(), self.now);
    }

    fn picker(&mut self) -> Picker<Address> {
        self.connects();
        let spec = self.spec.clone().expect("a picker");
        let ids = self.ids.clone();
        let by_id: HashMap<SubchannelId, Address> = ids.into_iter().map(|(a, i)| (i, a)).collect();
        Picker::new(&spec, move |id| by_id.get(&id).cloned(), 0)
    }
}

fn pick(p: &Picker<Address>, hash: u64) -> PickResult<Address> {
    p.pick(&PickRequest {
        method: "/a.B/C",
        avoid: &[],
        cluster: Some("a"),
        hash: Some(hash),
    })
}

fn picked(p: &Picker<Address>, hash: u64) -> Address {
    match pick(p, hash) {
        PickResult::Pick { handle, .. } => handle,
        other => panic!("{other:?}"),
    }
}

/// A request hash that lands exactly on the first ring entry of endpoint `n`.
fn hash_of(n: u8) -> u64 {
    xxh64(format!("10.0.0.{n}:443_0").as_bytes())
}

#[test]
fn endpoints_connect_lazily_when_a_pick_lands_on_them() {
    let mut s = Sim::new();
    // Nothing connects up front; the cluster (and the channel) are IDLE.
    assert_eq!(s.connects(), []);
    assert_eq!(s.state, Some(Idle));
    let p = s.picker();
    let PickerSpec::Clusters(clusters) = s.spec.clone().expect("a picker") else {
        panic!("not a cluster picker");
    };
    let ClusterPick::Ring(ring) = &clusters["a"].state else {
        panic!("{:?}", clusters["a"].state);
    };
    // Weights 1, 3 (1 × 3) and 2 (2 × 1): a ring of ceil(1024 / 6) × 6 entries.
    assert_eq!(ring.ring_size(), 1026);
    assert_eq!(ring.endpoints().len(), 3);
    // Locality weight × endpoint weight: 1 × 1, 1 × 3 and 2 × 1.
    assert_eq!(ring.entry_counts(), [171, 513, 342]);
    // A pick landing on 10.0.0.2 queues and asks for it; the channel then wakes the policy.
    assert_eq!(pick(&p, hash_of(2)), PickResult::Queue { exit_idle: true });
    s.lb.exit_idle(s.now);
    assert_eq!(s.connects(), [v4(2)], "only the endpoint the pick wants");
    // CONNECTING: picks landing on it queue without asking again.
    let p = s.picker();
    assert_eq!(s.state, Some(Connecting));
    assert_eq!(pick(&p, hash_of(2)), PickResult::Queue { exit_idle: false });
    s.ready(2);
    let p = s.picker();
    assert_eq!(s.state, Some(Ready));
    for _ in 0..5 {
        assert_eq!(
            picked(&p, hash_of(2)),
            v4(2),
            "the same hash, the same endpoint"
        );
    }
    // A hash landing on the still-IDLE 10.0.0.1 queues and asks for it (not READY 10.0.0.2).
    assert_eq!(pick(&p, hash_of(1)), PickResult::Queue { exit_idle: true });
    s.lb.exit_idle(s.now);
    assert_eq!(s.connects(), [v4(1)]);
}

#[test]
fn a_failed_endpoint_sends_its_picks_to_the_next_one_on_the_ring() {
    let mut s = Sim::new();
    let p = s.picker();
    for n in 1..=3 {
        assert_eq!(pick(&p, hash_of(n)), PickResult::Queue { exit_idle: true });
    }
    s.lb.exit_idle(s.now);
    let mut connected = s.connects();
    connected.sort();
    assert_eq!(connected, [v4(1), v4(2), v4(3)]);
    for n in 1..=3 {
        s.ready(n);
    }
    let p = s.picker();
    // Where each endpoint's keys go while all are READY.
    let hashes: Vec<u64> = (0..200u64).map(|i| xxh64(&i.to_le_bytes())).collect();
    let before: Vec<Address> = hashes.iter().map(|h| picked(&p, *h)).collect();
    assert!((1..=3).all(|n| before.contains(&v4(n))), "keys spread");
    // 10.0.0.2's connection fails: one endpoint in TRANSIENT_FAILURE, still READY overall.
    s.lb.subchannel_closed(s.ids[&v4(2)], s.now);
    s.connects();
    assert_eq!(
        pick(&s.picker(), hash_of(2)),
        PickResult::Queue { exit_idle: true }
    );
    s.lb.exit_idle(s.now);
    assert_eq!(s.connects(), [v4(2)]);
    s.fail(2);
    let p = s.picker();
    assert_eq!(s.state, Some(Ready));
    // Only 10.0.0.2's keys move, each to the next endpoint on the ring.
    for (h, was) in hashes.iter().zip(&before) {
        let now = picked(&p, *h);
        if *was == v4(2) {
            assert_ne!(now, v4(2));
        } else {
            assert_eq!(now, *was, "a key of a healthy endpoint moved");
        }
    }
}

#[test]
fn aggregate_failure_connects_one_idle_endpoint_and_all_failed_fails_picks() {
    let mut s = Sim::new();
    let p = s.picker();
    assert_eq!(pick(&p, hash_of(1)), PickResult::Queue { exit_idle: true });
    assert_eq!(pick(&p, hash_of(2)), PickResult::Queue { exit_idle: true });
    s.lb.exit_idle(s.now);
    let mut connected = s.connects();
    connected.sort();
    assert_eq!(connected, [v4(1), v4(2)]);
    // One failure among three endpoints, the other CONNECTING: CONNECTING, nothing more connects.
    s.fail(1);
    assert_eq!(s.connects(), []);
    assert_eq!(s.state, Some(Connecting));
    // The second failure: TRANSIENT_FAILURE with nothing CONNECTING, so the IDLE 10.0.0.3 connects.
    s.fail(2);
    assert_eq!(s.connects(), [v4(3)]);
    // It fails too: every pick fails with the cluster's message.
    s.fail(3);
    let p = s.picker();
    assert_eq!(s.state, Some(TransientFailure));
    match pick(&p, hash_of(3)) {
        PickResult::Fail(m) => assert!(m.contains("ring_hash") && m.contains("refused"), "{m}"),
        other => panic!("{other:?}"),
    }
    // Failed endpoints reconnect by themselves when their backoff ends.
    let until = s.lb.poll_timeout().expect("a backoff timer");
    s.now = until;
    s.lb.handle_timeout(until);
    assert!(!s.connects().is_empty());
}

#[test]
fn leaving_idle_without_a_pick_connects_one_endpoint() {
    let mut s = Sim::new();
    assert_eq!(s.connects(), []);
    assert_eq!(s.state, Some(Idle));
    // The channel asks the policy to leave IDLE (Channel::connect): one endpoint connects, the first.
    s.lb.exit_idle(s.now);
    assert_eq!(s.connects(), [v4(1)]);
    assert_eq!(s.state, Some(Connecting));
    // Asked again while it connects: nothing more.
    s.lb.exit_idle(s.now);
    assert_eq!(s.connects(), []);
    s.ready(1);
    s.connects();
    assert_eq!(s.state, Some(Ready));
    // Any other event leaves IDLE endpoints alone.
    s.lb.subchannel_closed(s.ids[&v4(1)], s.now);
    assert_eq!(s.connects(), []);
    assert_eq!(s.state, Some(Idle));
}
