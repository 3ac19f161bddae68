//! Load balancing over real sockets with several interop servers on loopback: round_robin's spread,
//! failover and reconnection with backoff, pick_first failover, the control plane picking up a new address
//! list with no call in flight, and a graceful switch of policy under load (real DNS: an in-process hickory
//! server on loopback); `close()` stopping the DNS resolver. Timing tests run on tokio's paused clock.

use grpc_test_support as support;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, ConnectivityState, Request, ResolverOptions};
use interop::dns::TestDns;
use interop::server::{self};
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use support::h2_server::{defaults, handler, H2Server};
use tokio::time::Instant;

use super::plugins::{backends, two_loopbacks_one_name, which, PICK_FIRST, ROUND_ROBIN};

fn channel_to(addrs: &[SocketAddr], config: &str) -> Channel {
    let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    Channel::builder(format!("ipv4:{}", list.join(",")))
        .default_service_config(config)
        .build()
        .expect("channel")
}

/// Calls until `pred` holds for a call's server (bounded), returning how many calls it took.
async fn calls_until(ch: &Channel, mut pred: impl FnMut(&str) -> bool) -> usize {
    for i in 1..=2000 {
        if let Ok(id) = which(ch).await {
            if pred(&id) {
                return i;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the condition never held");
}

#[tokio::test]
async fn round_robin_spreads_3000_calls_evenly_over_3_backends() {
    let servers = backends(3).await;
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let ch = channel_to(&addrs, ROUND_ROBIN);
    // Wait until every backend is connected (each has answered once).
    let mut seen = std::collections::HashSet::new();
    calls_until(&ch, |id| {
        seen.insert(id.to_owned());
        seen.len() == 3
    })
    .await;
    let mut counts: HashMap<String, usize> = HashMap::new();
    for _ in 0..3000 {
        *counts.entry(which(&ch).await.expect("call")).or_default() += 1;
    }
    assert_eq!(counts.len(), 3, "{counts:?}");
    for (server, n) in &counts {
        assert!(
            (950..=1050).contains(n),
            "{server} got {n} of 3000: {counts:?}"
        );
    }
    println!("round_robin over 3 backends, calls per backend: {counts:?}");
}

#[tokio::test(start_paused = true)]
async fn a_killed_backend_stops_getting_calls_and_is_reconnected_with_backoff() {
    let mut servers = backends(2).await;
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let (a, b) = (addrs[0].to_string(), addrs[1].to_string());
    let ch = channel_to(&addrs, ROUND_ROBIN);
    calls_until(&ch, |id| id == b).await;

    // Kill B: after the channel notices, every call goes to A.
    let killed = servers.pop().expect("b");
    killed.shutdown();
    let killed_at = Instant::now();
    calls_until(&ch, |id| id == a).await;
    for _ in 0..50 {
        assert_eq!(which(&ch).await.expect("A serves"), a);
    }

    // Bring B back on the same port 5 s later: it gets calls again once a reconnection attempt (spaced by
    // the connection backoff: 1 s, then 1.6 s, 2.56 s, ... ± 20 %) finds it.
    tokio::time::sleep_until(killed_at + Duration::from_secs(5)).await;
    let revived = server::start(addrs[1])
        .await
        .expect("restart on the same port");
    let revived_at = Instant::now();
    calls_until(&ch, |id| id == b).await;
    let waited = revived_at.elapsed();
    println!("backend reconnected {waited:?} after it came back");
    assert!(
        waited <= Duration::from_secs(5),
        "the next attempt within one backoff step: {waited:?}"
    );
    drop(revived);
}

#[tokio::test(start_paused = true)]
async fn pick_first_sends_everything_to_one_backend_and_fails_over() {
    let mut servers = backends(2).await;
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let ch = channel_to(&addrs, PICK_FIRST);
    let first = which(&ch).await.expect("call");
    assert_eq!(first, addrs[0].to_string(), "the first address wins");
    for _ in 0..20 {
        assert_eq!(
            which(&ch).await.expect("call"),
            first,
            "all calls to one backend"
        );
    }
    servers.remove(0).shutdown();
    let other = addrs[1].to_string();
    calls_until(&ch, |id| id == other).await;
    for _ in 0..20 {
        assert_eq!(which(&ch).await.expect("call"), other);
    }
}

#[tokio::test(start_paused = true)]
async fn fail_fast_and_wait_for_ready_calls_while_no_backend_is_up() {
    let (held, free) = support::reserved_port();
    let ch = channel_to(&[free], ROUND_ROBIN);
    let status = which(&ch).await.expect_err("no backend");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(ch.state(), ConnectivityState::TransientFailure);

    let waiting = {
        let ch = ch.clone();
        tokio::spawn(async move {
            let req = SimpleRequest {
                fill_server_id: true,
                ..Default::default()
            };
            ch.unary::<_, SimpleResponse>(
                paths::UNARY_CALL,
                Request::new(req)
                    .with_wait_for_ready(true)
                    .with_timeout(Duration::from_secs(60)),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !waiting.is_finished(),
        "a wait-for-ready call queues through TRANSIENT_FAILURE"
    );
    let status = which(&ch).await.expect_err("still no backend");
    assert_eq!(
        status.code(),
        Code::Unavailable,
        "fail-fast calls still fail"
    );
    drop(held);
    let _server = server::start(free).await.expect("server");
    let r = waiting
        .await
        .expect("task")
        .expect("succeeds once a backend is up");
    assert_eq!(r.message().server_id, free.to_string());
    assert_eq!(ch.state(), ConnectivityState::Ready);
}

#[tokio::test(start_paused = true)]
async fn the_channel_picks_up_a_new_address_list_without_calls() {
    // Two backends on the same port of two loopback addresses; DNS moves from the first to the second.
    let (first, second, dns) = two_loopbacks_one_name(Some(ROUND_ROBIN)).await;
    let port = first.addr.port();
    let ch = Channel::builder(format!("dns://{}/svc.test:{port}", dns.addr))
        .resolver_options(
            ResolverOptions::default()
                .with_min_interval(Duration::from_secs(1))
                .with_query_timeout(Duration::from_secs(2)),
        )
        .build()
        .expect("channel");
    ch.connect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut state = ch.state();
    while state != ConnectivityState::Ready {
        state = ch.wait_for_state_change(state, deadline).await;
        assert!(Instant::now() < deadline, "never READY");
    }

    // DNS now says 127.0.0.2; the first backend dies. No call is made: the control plane re-resolves on the
    // failure and connects to the new address by itself.
    dns.remove("svc.test", hickory_record_type_a()).await;
    dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, 2)).await;
    first.shutdown();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut saw_not_ready = false;
    loop {
        let next = ch.wait_for_state_change(state, deadline).await;
        assert!(
            Instant::now() < deadline,
            "the new address was never used (state {next:?})"
        );
        saw_not_ready |= next != ConnectivityState::Ready;
        state = next;
        if saw_not_ready && state == ConnectivityState::Ready {
            break;
        }
    }
    assert_eq!(which(&ch).await.expect("call"), second.addr.to_string());
}

fn hickory_record_type_a() -> interop::dns::RecordType {
    interop::dns::RecordType::A
}

#[tokio::test(start_paused = true)]
async fn an_idle_channel_drops_its_connections_and_wakes_on_the_next_call() {
    let servers = backends(1).await;
    let ch = Channel::builder(format!("ipv4:{}", servers[0].addr))
        .idle_timeout(Duration::from_secs(60))
        .build()
        .expect("channel");
    assert_eq!(ch.state(), ConnectivityState::Idle, "a new channel is IDLE");
    which(&ch).await.expect("call");
    assert_eq!(ch.state(), ConnectivityState::Ready);
    let state = ch
        .wait_for_state_change(
            ConnectivityState::Ready,
            Instant::now() + Duration::from_secs(120),
        )
        .await;
    assert_eq!(
        state,
        ConnectivityState::Idle,
        "IDLE after the idle timeout with no calls"
    );
    which(&ch).await.expect("the next call wakes it");
    assert_eq!(ch.state(), ConnectivityState::Ready);
    ch.close();
    let state = ch
        .wait_for_state_change(
            ConnectivityState::Ready,
            Instant::now() + Duration::from_secs(1),
        )
        .await;
    assert_eq!(state, ConnectivityState::Shutdown);
    let status = which(&ch).await.expect_err("closed");
    assert_eq!(status.code(), Code::Unavailable);
}

#[tokio::test(start_paused = true)]
async fn leaving_idle_reports_connecting_while_resolution_is_pending() {
    let (_socket, silent) = interop::dns::silent().await.expect("socket");
    let ch = Channel::builder(format!("dns://{silent}/svc.test:1"))
        .resolver_options(ResolverOptions::default().with_query_timeout(Duration::from_secs(30)))
        .build()
        .expect("channel");
    assert_eq!(ch.state(), ConnectivityState::Idle);
    ch.connect();
    let state = ch
        .wait_for_state_change(
            ConnectivityState::Idle,
            Instant::now() + Duration::from_secs(1),
        )
        .await;
    assert_eq!(state, ConnectivityState::Connecting);
}

/// `close()` stops the channel's DNS resolver: a name that never resolves (a DNS server that never
/// answers) is asked again and again with backoff while the channel lives, and no more once it is
/// closed, though the `Channel` value lives on. The queries are counted where they arrive.
#[tokio::test(start_paused = true)]
async fn closing_the_channel_stops_its_dns_resolver() {
    let (socket, silent) = interop::dns::silent().await.expect("socket");
    let queries = || {
        let mut buf = [0u8; 512];
        let mut n = 0;
        while socket.try_recv_from(&mut buf).is_ok() {
            n += 1;
        }
        n
    };
    let ch = Channel::builder(format!("dns://{silent}/svc.test:1"))
        .resolver_options(ResolverOptions::default().with_query_timeout(Duration::from_secs(1)))
        .build()
        .expect("channel");
    ch.connect();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(queries() > 0, "the resolver asks");
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert!(queries() > 0, "and asks again, with backoff");

    ch.close();
    // A query in flight at close() may still time out (1 s); nothing is asked after it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    queries();
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(queries(), 0, "the resolver went on after close()");
    drop(ch);
}

/// Records the states a channel goes through (a watch channel may merge quick steps) until `until` holds
/// or the deadline passes.
async fn states_until(
    ch: &Channel,
    until: ConnectivityState,
    within: Duration,
) -> Vec<ConnectivityState> {
    let deadline = Instant::now() + within;
    let mut state = ch.state();
    let mut seen = vec![state];
    while state != until {
        let next = ch.wait_for_state_change(state, deadline).await;
        if next == state {
            break;
        }
        seen.push(next);
        state = next;
    }
    seen
}

#[tokio::test(start_paused = true)]
async fn a_call_failed_by_resolution_leaves_the_channel_in_transient_failure_not_idle() {
    let dns = TestDns::start().await.expect("dns");
    // No records: the name does not resolve.
    let ch = Channel::builder(format!("dns://{}/gone.test:1", dns.addr))
        .resolver_options(ResolverOptions::default().with_query_timeout(Duration::from_secs(2)))
        .build()
        .expect("channel");
    assert_eq!(ch.state(), ConnectivityState::Idle);
    let status = which(&ch).await.expect_err("no addresses");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let seen = states_until(
        &ch,
        ConnectivityState::TransientFailure,
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        seen.last(),
        Some(&ConnectivityState::TransientFailure),
        "{seen:?}"
    );
    assert!(
        !seen[1..].contains(&ConnectivityState::Idle),
        "no IDLE after the call: {seen:?}"
    );
    // The resolver retries with backoff; the channel stays in TRANSIENT_FAILURE meanwhile.
    let later = ch
        .wait_for_state_change(
            ConnectivityState::TransientFailure,
            Instant::now() + Duration::from_secs(30),
        )
        .await;
    assert_eq!(later, ConnectivityState::TransientFailure);
}

#[tokio::test(start_paused = true)]
async fn a_channel_woken_by_connect_and_never_used_goes_idle_after_the_timeout() {
    let servers = backends(1).await;
    let ch = Channel::builder(format!("ipv4:{}", servers[0].addr))
        .idle_timeout(Duration::from_secs(60))
        .build()
        .expect("channel");
    ch.connect();
    let seen = states_until(&ch, ConnectivityState::Ready, Duration::from_secs(5)).await;
    assert_eq!(seen.last(), Some(&ConnectivityState::Ready), "{seen:?}");
    let woke = Instant::now();
    let seen = states_until(&ch, ConnectivityState::Idle, Duration::from_secs(120)).await;
    assert_eq!(
        seen,
        [ConnectivityState::Ready, ConnectivityState::Idle],
        "IDLE after the idle timeout though no call ever came"
    );
    let after = woke.elapsed();
    assert!(
        after >= Duration::from_secs(59) && after <= Duration::from_secs(61),
        "{after:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_resolver_that_cannot_be_set_up_leaves_the_channel_in_transient_failure() {
    // A resolv.conf with no name server: the system resolver cannot be set up.
    let ch = Channel::builder("dns:///svc.test:1")
        .resolver_options(ResolverOptions::default().with_resolv_conf("search test\n".to_owned()))
        .build()
        .expect("channel");
    ch.connect();
    let seen = states_until(
        &ch,
        ConnectivityState::TransientFailure,
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        seen.last(),
        Some(&ConnectivityState::TransientFailure),
        "{seen:?}"
    );
    // Not overwritten by CONNECTING.
    let later = ch
        .wait_for_state_change(
            ConnectivityState::TransientFailure,
            Instant::now() + Duration::from_secs(5),
        )
        .await;
    assert_eq!(later, ConnectivityState::TransientFailure);
    let status = which(&ch).await.expect_err("no resolver");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("DNS resolver"), "{status:?}");
}

#[tokio::test(start_paused = true)]
async fn leaving_idle_resolves_again_instead_of_reusing_an_old_resolution() {
    // A backend on 127.0.0.1 and one on 127.0.0.2, same port. While the channel is IDLE, DNS moves from
    // the first to the second and the first goes away: the call that wakes the channel must use a fresh
    // resolution (a fail-fast call to the old address would fail).
    let first = server::start("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("server");
    let port = first.addr.port();
    let second = server::start(SocketAddr::from((Ipv4Addr::new(127, 0, 0, 2), port)))
        .await
        .expect("second loopback address");
    let dns = TestDns::start().await.expect("dns");
    dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, 1)).await;
    let ch = Channel::builder(format!("dns://{}/svc.test:{port}", dns.addr))
        .idle_timeout(Duration::from_secs(60))
        .service_config_lookup(false)
        .resolver_options(
            ResolverOptions::default()
                .with_min_interval(Duration::from_secs(1))
                .with_query_timeout(Duration::from_secs(2)),
        )
        .build()
        .expect("channel");
    assert_eq!(which(&ch).await.expect("call"), first.addr.to_string());
    let state = ch
        .wait_for_state_change(
            ConnectivityState::Ready,
            Instant::now() + Duration::from_secs(120),
        )
        .await;
    assert_eq!(state, ConnectivityState::Idle);
    dns.remove("svc.test", hickory_record_type_a()).await;
    dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, 2)).await;
    first.shutdown();
    assert_eq!(
        which(&ch)
            .await
            .expect("the waking call uses the fresh resolution"),
        second.addr.to_string()
    );
}

// ---- A graceful policy switch, under load --------------------------------------------------------------
//
// When a new service config changes the policy, the old policy's READY connections keep serving (and finish
// the calls they carry) until the new policy is READY, so no call fails. Two backends on the same port of
// 127.0.0.1 and 127.0.0.2, real time with bounded waits on conditions.

const SWITCH_UNARY: &str = "/switch.Svc/Unary";

/// A backend on `addr` answering its name after a moment; [`H2Server::drain`] shuts its connections down
/// gracefully.
async fn named_backend(addr: SocketAddr, name: &'static str) -> H2Server {
    let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
    H2Server::serve_tcp(
        listener,
        defaults,
        handler(move |mut stream| async move {
            // Calls take a moment, so some are always in flight.
            tokio::time::sleep(Duration::from_millis(2)).await;
            stream.ok(name.as_bytes());
        }),
    )
}

/// A call to a named backend: the name of the backend that answered.
async fn named_call(ch: &Channel) -> Result<String, grpc_channel::Status> {
    let r = ch
        .unary_raw(
            SWITCH_UNARY,
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(5)),
        )
        .await?;
    Ok(String::from_utf8_lossy(&r.into_message()).into_owned())
}

#[tokio::test]
async fn switching_from_round_robin_to_pick_first_fails_no_call_under_load() {
    let a = named_backend("127.0.0.1:0".parse().expect("addr"), "a").await;
    let port = a.addr().port();
    let b = named_backend(SocketAddr::from((Ipv4Addr::new(127, 0, 0, 2), port)), "b").await;
    let dns = TestDns::start().await.expect("dns");
    dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, 1)).await;
    dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, 2)).await;
    dns.set_service_config(
        "svc.test",
        r#"[{"serviceConfig":{"loadBalancingConfig":[{"round_robin":{}}]}}]"#,
    )
    .await;
    let ch = Channel::builder(format!("dns://{}/svc.test:{port}", dns.addr))
        .resolver_options(
            ResolverOptions::default()
                .with_min_interval(Duration::from_millis(100))
                .with_query_timeout(Duration::from_secs(2)),
        )
        .build()
        .expect("channel");
    // round_robin: both backends answer.
    let mut seen = std::collections::HashSet::new();
    for _ in 0..200 {
        seen.insert(named_call(&ch).await.expect("warm-up call"));
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(seen.len(), 2, "round_robin reaches both backends");

    // Load: 8 loops of calls, each failure counted.
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut loops = Vec::new();
    for _ in 0..8 {
        let (ch, stop, failures, done) = (ch.clone(), stop.clone(), failures.clone(), done.clone());
        loops.push(tokio::spawn(async move {
            let mut last = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match named_call(&ch).await {
                    Ok(name) => last.push(name),
                    Err(status) => {
                        eprintln!("failed during the switch: {status:?}");
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            last
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The new config says pick_first; backend b's graceful GOAWAY makes round_robin re-resolve.
    dns.set_service_config(
        "svc.test",
        r#"[{"serviceConfig":{"loadBalancingConfig":[{"pick_first":{}}]}}]"#,
    )
    .await;
    b.drain();
    // pick_first sends every call to one backend: wait (bounded) for a long run of calls to one.
    let mut run = 0;
    let mut previous = String::new();
    for _ in 0..5000 {
        let name = named_call(&ch).await.expect("a call during the switch");
        run = if name == previous { run + 1 } else { 1 };
        previous = name;
        if run >= 200 {
            break;
        }
    }
    assert!(run >= 200, "the channel never switched to pick_first");
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        l.await.expect("load loop");
    }
    assert!(done.load(Ordering::Relaxed) > 100, "the load ran");
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "no call fails while the policy switches"
    );
}
