//! The xDS cluster manager's per-cluster outlier ejections, per-cluster connection errors and transports
//! (subchannels keyed by address and `TransportKey`), on the parent module's simulator.

use super::*;

#[test]
fn an_ejected_endpoint_takes_no_picks_in_any_cluster() {
    let mut s = Sim::with(vec![
        ("a", priorities(&[&[1, 2]])),
        ("b", priorities(&[&[2]])),
    ]);
    s.ready(0);
    s.ready(1);
    assert_eq!(s.picker_shown(), "{a: READY [0,1], b: READY [1]}");
    s.lb.eject(&v4(2), s.now);
    assert_eq!(s.picker_shown(), "{a: READY [0], b: fail}");
    assert_eq!(s.connections(), Vec::<String>::new(), "kept connected");
    s.lb.uneject(&v4(2), s.now);
    assert_eq!(s.picker_shown(), "{a: READY [0,1], b: READY [1]}");
}

#[test]
fn a_clusters_ejection_applies_to_its_own_picks_only() {
    let mut s = Sim::with(vec![
        ("a", priorities(&[&[1, 2]])),
        ("b", priorities(&[&[2]])),
    ]);
    s.ready(0);
    s.ready(1);
    assert_eq!(s.picker_shown(), "{a: READY [0,1], b: READY [1]}");
    s.lb.set_ejected_in_cluster("a", &v4(2), true, s.now);
    assert_eq!(s.picker_shown(), "{a: READY [0], b: READY [1]}");
    // Every READY endpoint of "b" ejected: its calls fail.
    s.lb.set_ejected_in_cluster("b", &v4(2), true, s.now);
    assert_eq!(s.picker_shown(), "{a: READY [0], b: fail}");
    assert_eq!(s.connections(), Vec::<String>::new(), "kept connected");
    s.lb.set_ejected_in_cluster("a", &v4(2), false, s.now);
    s.lb.set_ejected_in_cluster("b", &v4(2), false, s.now);
    assert_eq!(s.picker_shown(), "{a: READY [0,1], b: READY [1]}");
}

#[test]
fn a_priority_whose_every_endpoint_its_cluster_ejected_fails_over_and_comes_back() {
    let mut s = Sim::with(vec![
        ("a", priorities(&[&[1, 2], &[3]])),
        ("b", priorities(&[&[1]])),
    ]);
    s.ready(0);
    s.ready(1);
    assert_eq!(s.picker_shown(), "{a: READY [0,1], b: READY [0]}");
    s.lb.set_ejected_in_cluster("a", &v4(1), true, s.now);
    s.lb.set_ejected_in_cluster("a", &v4(2), true, s.now);
    // Priority 0 of "a" looks TRANSIENT_FAILURE: priority 1 connects; "b" keeps its pick.
    assert_eq!(s.connections(), ["connect 2 10.0.0.3:443"]);
    s.ready(2);
    assert_eq!(s.picker_shown(), "{a: READY [2], b: READY [0]}");
    s.lb.set_ejected_in_cluster("a", &v4(1), false, s.now);
    assert_eq!(s.picker_shown(), "{a: READY [0], b: READY [0]}");
}

#[test]
fn a_clusters_failure_quotes_its_own_subchannels_latest_error() {
    let mut s = Sim::with(vec![("a", priorities(&[&[1]])), ("b", priorities(&[&[2]]))]);
    s.lb.subchannel_failed(SubchannelId(0), "refused by a".into(), s.now);
    s.lb.subchannel_failed(SubchannelId(1), "refused by b".into(), s.now);
    let p = s.picker(0);
    for (cluster, own, other) in [
        ("a", "refused by a", "refused by b"),
        ("b", "refused by b", "refused by a"),
    ] {
        match pick(&p, cluster) {
            PickResult::Fail(m) => assert!(m.contains(own) && !m.contains(other), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn other_pickers_hand_out_no_guard_and_the_cluster_picker_lists_ready_addresses() {
    let rr = Picker::new(
        &PickerSpec::Ready(vec![(SubchannelId(4), v4(4))]),
        |id| Some(id.0),
        0,
    );
    assert_eq!(
        rr.pick(&PickRequest::default()),
        PickResult::Pick {
            handle: 4,
            addr: v4(4),
            guard: None
        }
    );
    let mut s = Sim::with(vec![
        ("a", priorities(&[&[1, 2]])),
        ("b", priorities(&[&[2, 3]])),
    ]);
    s.ready(1);
    s.ready(2);
    let mut ready = s.picker(0).ready_addresses();
    ready.sort_by_key(|a| a.to_string());
    assert_eq!(ready, [v4(2), v4(3)]);
}

fn secured(list: &[&[u8]], transport: Option<&str>) -> ClusterConfig {
    let mut c = priorities(list);
    c.transport = transport.map(TransportKey::new);
    c
}

#[test]
fn clusters_with_different_transports_never_share_a_subchannel() {
    let mut s = Sim::with(vec![
        ("a", secured(&[&[1]], Some("mtls"))),
        ("b", secured(&[&[1]], None)),
        ("c", secured(&[&[1]], Some("mtls"))),
        ("d", secured(&[&[1]], Some("tls"))),
    ]);
    // One subchannel per (address, transport): a and c share one.
    let connects = ["connect 0 10.0.0.1:443 via mtls", "connect 1 10.0.0.1:443"];
    assert_eq!(
        s.connections(),
        [connects[0], connects[1], "connect 2 10.0.0.1:443 via tls"]
    );
    s.ready(0);
    assert_eq!(
        s.picker_shown(),
        "{a: READY [0], b: queue, c: READY [0], d: queue}"
    );
    // A cluster whose transport changes moves to a new subchannel; the old one goes once unused.
    s.update(vec![
        ("a", secured(&[&[1]], Some("mtls"))),
        ("b", secured(&[&[1]], Some("tls"))),
        ("c", secured(&[&[1]], Some("mtls"))),
    ]);
    assert_eq!(s.connections(), ["disconnect 1"]);
    s.update(vec![("a", secured(&[&[1]], Some("mtls2")))]);
    assert_eq!(
        s.connections(),
        [
            "connect 3 10.0.0.1:443 via mtls2",
            "disconnect 0",
            "disconnect 2"
        ]
    );
}

#[test]
fn ejection_applies_to_every_transport_of_an_address() {
    let mut s = Sim::with(vec![
        ("a", secured(&[&[1, 2]], Some("mtls"))),
        ("b", secured(&[&[1, 2]], None)),
    ]);
    s.connections();
    (0..4).for_each(|id| s.ready(id));
    assert_eq!(s.picker_shown(), "{a: READY [0,1], b: READY [2,3]}");
    s.lb.eject(&v4(1), s.now);
    assert_eq!(s.picker_shown(), "{a: READY [1], b: READY [3]}");
}
