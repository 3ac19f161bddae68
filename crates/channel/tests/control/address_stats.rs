//! Per-address figures in `Channel::stats()` (issue 35, "where did my calls go?"): round_robin over an
//! `ipv4:` list of three interop servers and an address where nothing listens; the attempts each address
//! carried, and each subchannel's state; with health checking, each address's health.

use grpc_test_support as support;

use std::time::Duration;

use grpc_channel::lb::Health;
use grpc_channel::{Channel, Code, ConnectivityState, Request};
use interop::health::ServingStatus;
use interop_proto::{paths, Empty};
use support::guards::guarded;

const ROUND_ROBIN: &str = r#"{"loadBalancingConfig":[{"round_robin":{}}]}"#;

async fn empty_call(ch: &Channel) -> Result<(), grpc_channel::Status> {
    guarded(
        "empty call",
        ch.unary::<_, Empty>(paths::EMPTY_CALL, Request::new(Empty {})),
    )
    .await
    .map(drop)
}

/// Waits (on the paused clock, at most 10 s of it) until `ready` holds of the channel's stats.
async fn until(ch: &Channel, ready: impl Fn(&grpc_channel::ChannelStats) -> bool) {
    for _ in 0..1000 {
        if ready(&ch.stats()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never: {:#?}", ch.stats().addresses);
}

#[tokio::test(start_paused = true)]
async fn per_address_calls_and_states_over_three_backends_and_one_down() {
    let mut addrs = Vec::new();
    for _ in 0..3 {
        addrs.push(support::interop_server().await);
    }
    let (_held, down) = support::reserved_port();
    let mut listed = addrs.clone();
    listed.push(down);
    let ch = support::channel_with_config(&support::ipv4_target(&listed), ROUND_ROBIN);
    ch.connect();
    let up: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    let down = down.to_string();
    until(&ch, |s| {
        up.iter().all(|a| {
            s.addresses
                .get(a)
                .is_some_and(|a| a.state == ConnectivityState::Ready)
        }) && s
            .addresses
            .get(&down)
            .is_some_and(|a| a.state == ConnectivityState::TransientFailure)
    })
    .await;
    for _ in 0..30 {
        empty_call(&ch).await.expect("a READY backend answers");
    }
    let stats = ch.stats();
    assert_eq!(stats.addresses.len(), 4, "{:#?}", stats.addresses);
    for a in &up {
        let s = &stats.addresses[a];
        assert_eq!(
            (s.calls_started, s.calls_succeeded, s.calls_failed),
            (10, 10, 0),
            "round_robin: a third of the calls each, on {a}: {:#?}",
            stats.addresses
        );
        assert_eq!(s.health, None, "no health checking");
    }
    let d = &stats.addresses[&down];
    assert_eq!(
        (d.calls_started, d.calls_succeeded, d.calls_failed),
        (0, 0, 0)
    );
    assert_ne!(d.state, ConnectivityState::Ready);
    assert_eq!(stats.calls_started, 30);

    // A call that fails on the server counts as failed on its address.
    let bad = guarded(
        "unimplemented call",
        ch.unary::<_, Empty>(
            "/grpc.testing.TestService/UnimplementedCall",
            Request::new(Empty {}),
        ),
    )
    .await
    .expect_err("unimplemented");
    assert_eq!(bad.code(), Code::Unimplemented);
    let stats = ch.stats();
    let failed: u64 = stats.addresses.values().map(|s| s.calls_failed).sum();
    let started: u64 = stats.addresses.values().map(|s| s.calls_started).sum();
    assert_eq!((started, failed), (31, 1), "{:#?}", stats.addresses);
}

/// With round_robin and a `healthCheckConfig`, each address shows its health; a backend that stops serving
/// shows NotServing and stays READY; a backend killed leaves READY.
#[tokio::test(start_paused = true)]
async fn per_address_health_and_a_killed_backend() {
    const SVC: &str = "grpc.testing.TestService";
    let servers = [
        support::interop_server_handle().await,
        support::interop_server_handle().await,
    ];
    for s in &servers {
        s.health().set(SVC, ServingStatus::Serving);
    }
    let addrs: Vec<_> = servers.iter().map(|s| s.addr).collect();
    let config = format!(
        r#"{{"healthCheckConfig":{{"serviceName":"{SVC}"}},
            "loadBalancingConfig":[{{"round_robin":{{}}}}]}}"#
    );
    let ch = support::channel_with_config(&support::ipv4_target(&addrs), config);
    ch.connect();
    let [a, b] = [addrs[0].to_string(), addrs[1].to_string()];
    until(&ch, |s| {
        [&a, &b].iter().all(|x| {
            s.addresses.get(*x).is_some_and(|x| {
                x.state == ConnectivityState::Ready && x.health == Some(Health::Serving)
            })
        })
    })
    .await;
    servers[1].health().set(SVC, ServingStatus::NotServing);
    until(&ch, |s| {
        s.addresses
            .get(&b)
            .is_some_and(|x| x.health == Some(Health::NotServing))
    })
    .await;
    assert_eq!(ch.stats().addresses[&b].state, ConnectivityState::Ready);
    let [first, second] = servers;
    first.shutdown();
    until(&ch, |s| {
        s.addresses
            .get(&a)
            .is_some_and(|x| x.state != ConnectivityState::Ready)
    })
    .await;
    assert_eq!(ch.stats().addresses[&a].health, Some(Health::Unknown));
    drop(second);
}

/// `ChannelStats::addresses` keys a Unix socket address as `unix:<path>`, as documented: the address's
/// text, the same key as `ejected_addresses`, `ejections`, `not_serving_addresses` and the tracing events'
/// `address` field (a bare path could not be told from other forms, nor found in those).
#[tokio::test(start_paused = true)]
async fn a_unix_socket_address_is_keyed_by_unix_and_its_path_as_documented() {
    let path = support::socket_path("address-stats");
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).expect("bind the socket");
    let server = tokio::spawn(interop::server::serve_unix(listener));
    let ch = Channel::builder(format!("unix:{}", path.display()))
        .build()
        .expect("channel");
    empty_call(&ch).await.expect("served over the socket");
    let stats = ch.stats();
    let key = format!("unix:{}", path.display());
    let _ = std::fs::remove_file(&path);
    server.abort();
    assert_eq!(
        stats.addresses.get(&key).map(|s| s.calls_started),
        Some(1),
        "keys: {:?}",
        stats.addresses.keys().collect::<Vec<_>>()
    );
}

/// Each attempt counts on the address it went to (issue 35, scope 5; channelz counts a subchannel's
/// calls whatever the policy is doing), graceful policy switch included: while a new policy connects,
/// the retired policy's READY connection keeps serving, and those calls reach the same address. Here the
/// config switches pick_first to round_robin with health checking, and the backend never answers the
/// health Watch, so round_robin stays CONNECTING and the old connection serves 5 calls: the address shows
/// 1 call started (the one before the switch) instead of 6. Wrong: `control/graceful_switch.rs`
/// (`Retired::picker`) builds its handles with `results: None`, so attempts picked through the retired
/// picker reach no counter (outlier detection loses them too).
#[tokio::test(start_paused = true)]
async fn calls_served_during_a_graceful_policy_switch_count_on_their_address() {
    use bytes::Bytes;
    use grpc_channel::resolver::{manual, Address, Endpoint};
    use support::h2_server::{defaults, handler, H2Server, Stream};

    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            if s.path.starts_with("/grpc.health.v1.Health/") {
                // The health Watch never answers: health checking keeps round_robin CONNECTING.
                s.wait_reset().await;
                return;
            }
            if s.read_to_end().await.is_err() {
                return;
            }
            s.ok(b"");
        }),
    )
    .await;
    let addr = server.addr();
    let (resolver, pushed) = manual("switch");
    pushed
        .set(vec![Endpoint::new(Address::Tcp(addr))])
        .expect("endpoints");
    let ch = Channel::builder("switch:///fleet")
        .resolver(resolver)
        .build()
        .expect("channel");
    let call = || {
        guarded(
            "raw call",
            ch.unary_raw("/t.S/M", Request::new(Bytes::new())),
        )
    };
    call().await.expect("pick_first serves");
    pushed
        .set_service_config(Some(
            r#"{"healthCheckConfig":{"serviceName":"t.S"},
                "loadBalancingConfig":[{"round_robin":{}}]}"#
                .to_owned(),
        ))
        .expect("config");
    for _ in 0..500 {
        if server.opens_of("/grpc.health.v1.Health/Watch") > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        server.opens_of("/grpc.health.v1.Health/Watch"),
        1,
        "round_robin's own connection is READY and health checked"
    );
    for _ in 0..5 {
        call().await.expect("the retired connection serves");
    }
    let served: Vec<usize> = server
        .opens()
        .iter()
        .filter(|o| o.path == "/t.S/M")
        .map(|o| o.conn)
        .collect();
    assert_eq!(served, [1; 6], "every call on pick_first's connection");
    let stats = ch.stats();
    let s = &stats.addresses[&addr.to_string()];
    assert_eq!(
        (s.calls_started, s.calls_succeeded),
        (6, 6),
        "{:#?}",
        stats.addresses
    );
}

/// A row's state is its subchannel's (`AddressStats::state`: IDLE before the policy connects to the
/// address, or after its connection closed). After a switch from round_robin (which connected every
/// address) to pick_first (which connects the first one only), the other addresses have no subchannel
/// and no connection: they are IDLE. They keep showing READY for good. Wrong: the event loop retires the
/// old policy's subchannels (`control/event_loop/release.rs`, `retire_policy`, and `Retired::release`
/// in `control/graceful_switch.rs`) without setting their rows, and the closing connections' events are
/// no longer current, so nothing ever moves those rows off READY.
#[tokio::test(start_paused = true)]
async fn after_a_switch_to_pick_first_the_addresses_it_did_not_connect_are_not_shown_ready() {
    use grpc_channel::resolver::{manual, Address, Endpoint};

    let mut addrs = Vec::new();
    for _ in 0..3 {
        addrs.push(support::interop_server().await);
    }
    let (resolver, pushed) = manual("switch-back");
    pushed
        .set(
            addrs
                .iter()
                .map(|a| Endpoint::new(Address::Tcp(*a)))
                .collect(),
        )
        .expect("endpoints");
    pushed
        .set_service_config(Some(ROUND_ROBIN.to_owned()))
        .expect("config");
    let ch = Channel::builder("switch-back:///fleet")
        .resolver(resolver)
        .build()
        .expect("channel");
    ch.connect();
    let keys: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    until(&ch, |s| {
        keys.iter().all(|k| {
            s.addresses
                .get(k)
                .is_some_and(|a| a.state == ConnectivityState::Ready)
        })
    })
    .await;
    pushed
        .set_service_config(Some(
            r#"{"loadBalancingConfig":[{"pick_first":{}}]}"#.to_owned(),
        ))
        .expect("config");
    for _ in 0..6 {
        empty_call(&ch).await.expect("pick_first serves");
    }
    // Plenty of time for the switch to end and the retired connections to close.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let stats = ch.stats();
    assert_eq!(
        stats.addresses[&keys[0]].state,
        ConnectivityState::Ready,
        "pick_first's address"
    );
    for k in &keys[1..] {
        assert_ne!(
            stats.addresses[k].state,
            ConnectivityState::Ready,
            "pick_first has no connection to {k}: {:#?}",
            stats.addresses
        );
    }
}
