//! Outlier detection (gRFC A50) end to end: round_robin under `outlier_detection_experimental` over three
//! loopback backends, on tokio's paused clock. Healthy backends are interop servers (`UnaryCall` answers
//! OK); a failing one is the fault-injecting server, which answers `UnaryCall` UNIMPLEMENTED: a call's
//! result says which kind of backend served it.

mod support;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use grpc_channel::{Channel, Code, Request, ResolverOptions, Status};
use interop::dns::TestDns;
use interop::faulty::FaultyServer;
use interop::server::{self, ServerHandle};
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use support::guards::guarded;

/// Failure percentage: an address failing more than half of at least 10 calls in a 1 s interval is ejected
/// for 5 s (times its multiplier), when at least 3 addresses had that many calls.
fn outlier_config(max_ejection_percent: u32) -> String {
    format!(
        r#"{{"loadBalancingConfig":[{{"outlier_detection_experimental":{{
            "interval":"1s","baseEjectionTime":"5s","maxEjectionPercent":{max_ejection_percent},
            "failurePercentageEjection":{{"threshold":50,"enforcementPercentage":100,
                                          "minimumHosts":3,"requestVolume":10}},
            "childPolicy":[{{"round_robin":{{}}}}]}}}}]}}"#
    )
}

const ROUND_ROBIN: &str = r#"{"loadBalancingConfig":[{"round_robin":{}}]}"#;

async fn healthy() -> ServerHandle {
    server::start("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("server")
}

async fn failing() -> FaultyServer {
    support::faulty_server().await
}

fn channel(addrs: &[SocketAddr], config: &str) -> Channel {
    support::channel_with_config(&support::ipv4_target(addrs), config)
}

/// One call: `Ok` from a healthy backend, UNIMPLEMENTED from a failing one.
async fn call(ch: &Channel) -> Result<(), Status> {
    guarded(
        "unary call",
        ch.unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(SimpleRequest::default())),
    )
    .await
    .map(|_| ())
}

/// `n` calls; how many failed (each failure must be the failing backend's UNIMPLEMENTED).
async fn failures(ch: &Channel, n: usize) -> usize {
    let mut failed = 0;
    for _ in 0..n {
        if let Err(status) = call(ch).await {
            assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
            failed += 1;
        }
    }
    failed
}

/// Rounds of 60 calls, each followed by a second (a sweep), until something is ejected; how many rounds.
async fn until_ejected(ch: &Channel) -> usize {
    for round in 1..=5 {
        failures(ch, 60).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        if !ch.stats().ejected_addresses.is_empty() {
            return round;
        }
    }
    panic!("nothing was ejected: {:?}", ch.stats().ejected_addresses);
}

#[tokio::test(start_paused = true)]
async fn a_failing_backend_is_ejected_after_an_interval_and_returns_after_the_base_ejection_time() {
    let (a, b, bad) = (healthy().await, healthy().await, failing().await);
    let ch = channel(&[a.addr, b.addr, bad.addr], &outlier_config(10));
    // The first calls of the first interval go wherever round_robin sends them: a third fail.
    let rounds = until_ejected(&ch).await;
    assert!(
        rounds <= 2,
        "ejected after {rounds} intervals (the first has the calls)"
    );
    let stats = ch.stats();
    assert_eq!(stats.ejected_addresses, [bad.addr.to_string()]);
    assert_eq!(stats.ejections.get(&bad.addr.to_string()), Some(&1));

    // Ejected: it gets no calls, so every call succeeds (on the two others).
    assert_eq!(
        failures(&ch, 100).await,
        0,
        "no call reaches the ejected backend"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(failures(&ch, 100).await, 0, "still ejected 2 s later");

    // After baseEjectionTime (5 s × multiplier 1) a sweep returns it, and its connection was kept.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(ch.stats().ejected_addresses.is_empty());
    let failed = failures(&ch, 30).await;
    assert!(
        (5..=15).contains(&failed),
        "back in the rotation: about a third of 30 calls fail, {failed} did"
    );
    assert_eq!(
        bad.connections(),
        1,
        "ejection keeps the connection: no reconnection"
    );
}

#[tokio::test(start_paused = true)]
async fn max_ejection_percent_keeps_backends_in_service_when_all_fail() {
    let servers = [failing().await, failing().await, failing().await];
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    // 50 %: the first ejection (0 of 3 ejected), the second (1 of 3, 33 %), not a third (2 of 3, 67 %).
    let ch = channel(&addrs, &outlier_config(50));
    until_ejected(&ch).await;
    for _ in 0..3 {
        assert_eq!(
            failures(&ch, 30).await,
            30,
            "the backend left in service still fails"
        );
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let ejected = ch.stats().ejected_addresses;
        assert_eq!(ejected.len(), 2, "{ejected:?}");
    }

    // 10 %: only the first ejection.
    let ch = channel(&addrs, &outlier_config(10));
    until_ejected(&ch).await;
    failures(&ch, 30).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(ch.stats().ejected_addresses.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn without_outlier_detection_nothing_is_ejected() {
    let (a, b, bad) = (healthy().await, healthy().await, failing().await);
    let ch = channel(&[a.addr, b.addr, bad.addr], ROUND_ROBIN);
    failures(&ch, 30).await;
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let failed = failures(&ch, 60).await;
        assert!(
            (15..=25).contains(&failed),
            "a third of 60 calls fail: {failed}"
        );
    }
    let stats = ch.stats();
    assert!(stats.ejected_addresses.is_empty());
    assert!(stats.ejections.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_config_with_no_algorithm_counts_and_ejects_nothing() {
    let (a, b, bad) = (healthy().await, healthy().await, failing().await);
    let config = r#"{"loadBalancingConfig":[{"outlier_detection_experimental":{
        "interval":"1s","childPolicy":[{"round_robin":{}}]}}]}"#;
    let ch = channel(&[a.addr, b.addr, bad.addr], config);
    failures(&ch, 30).await;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let failed = failures(&ch, 60).await;
        assert!((15..=25).contains(&failed), "{failed}");
    }
    assert!(ch.stats().ejected_addresses.is_empty());
}

#[tokio::test(start_paused = true)]
async fn failed_attempts_count_even_when_a_retry_saves_the_call() {
    let (a, b, bad) = (healthy().await, healthy().await, failing().await);
    // Every call that lands on the failing backend is retried elsewhere (the pick avoids the address the
    // call used) and succeeds: only the attempts tell the detector about the failing backend.
    let config = r#"{"loadBalancingConfig":[{"outlier_detection_experimental":{
            "interval":"1s","baseEjectionTime":"5s",
            "failurePercentageEjection":{"threshold":50,"enforcementPercentage":100,
                                         "minimumHosts":3,"requestVolume":10},
            "childPolicy":[{"round_robin":{}}]}}],
        "methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],
            "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.01s",
                           "backoffMultiplier":1,"retryableStatusCodes":["UNIMPLEMENTED"]}}]}"#;
    let ch = channel(&[a.addr, b.addr, bad.addr], config);
    assert_eq!(failures(&ch, 60).await, 0, "the retries save every call");
    let retries: u64 = ch.stats().methods.values().map(|m| m.retries).sum();
    assert!(
        retries >= 10,
        "the failing backend had its share: {retries}"
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(ch.stats().ejected_addresses, [bad.addr.to_string()]);
    assert_eq!(failures(&ch, 60).await, 0);
    let before = ch.stats().methods.values().map(|m| m.retries).sum::<u64>();
    failures(&ch, 30).await;
    let after = ch.stats().methods.values().map(|m| m.retries).sum::<u64>();
    assert_eq!(
        after, before,
        "no call reaches the ejected backend: no retry"
    );
}

/// A failing backend on `addr`, counting the connections it accepts.
async fn failing_at(addr: SocketAddr) -> Arc<AtomicUsize> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("a loopback address");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((tcp, peer)) = listener.accept().await {
            count.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(FaultyServer::detached().serve_connection(tcp, peer));
        }
    });
    accepted
}

#[tokio::test(start_paused = true)]
async fn a_new_outlier_config_alone_keeps_the_child_policy_and_its_connections() {
    // Three backends on one port of 127.0.0.1-3 (the third fails every call), and 127.0.0.4 where nothing
    // listens: its failed connection attempts make round_robin ask DNS again, which brings new configs.
    let a = healthy().await;
    let port = a.addr.port();
    let _b = server::start(SocketAddr::from((Ipv4Addr::new(127, 0, 0, 2), port)))
        .await
        .expect("a second loopback address");
    let bad = SocketAddr::from((Ipv4Addr::new(127, 0, 0, 3), port));
    let bad_connections = failing_at(bad).await;
    let dns = TestDns::start().await.expect("dns");
    for n in 1..=4 {
        dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, n)).await;
    }
    let config = |algorithm: &str| {
        format!(
            r#"[{{"serviceConfig":{{"loadBalancingConfig":[{{"outlier_detection_experimental":{{
                "interval":"1s","baseEjectionTime":"30s"{algorithm},
                "childPolicy":[{{"round_robin":{{}}}}]}}}}]}}}}]"#
        )
    };
    // First no algorithm: nothing counts, nothing is ejected.
    dns.set_service_config("svc.test", &config("")).await;
    let ch = Channel::builder(format!("dns://{}/svc.test:{port}", dns.addr))
        .resolver_options(
            ResolverOptions::default()
                .with_min_interval(Duration::from_millis(100))
                .with_query_timeout(Duration::from_secs(2)),
        )
        .build()
        .expect("channel");
    for _ in 0..3 {
        assert!(
            failures(&ch, 60).await > 0,
            "the failing backend is in service"
        );
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    assert!(ch.stats().ejected_addresses.is_empty());
    assert_eq!(bad_connections.load(Ordering::Relaxed), 1);

    // Then failure percentage: only the outlier detection changes.
    dns.set_service_config(
        "svc.test",
        &config(
            r#","failurePercentageEjection":{"threshold":50,"enforcementPercentage":100,
                "minimumHosts":3,"requestVolume":10}"#,
        ),
    )
    .await;
    let mut ejected = Vec::new();
    for _ in 0..30 {
        failures(&ch, 60).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        ejected = ch.stats().ejected_addresses;
        if !ejected.is_empty() {
            break;
        }
    }
    assert_eq!(ejected, [bad.to_string()], "the new config applies");
    assert_eq!(failures(&ch, 60).await, 0);
    assert_eq!(
        bad_connections.load(Ordering::Relaxed),
        1,
        "the child policy was kept: no new connection"
    );
}

/// A backend that takes every call and never answers: unary calls to it end by their deadline before any
/// response headers (before commit), and those count as failures too.
#[tokio::test(start_paused = true)]
async fn a_backend_that_never_answers_is_ejected_by_the_deadlines_it_causes() {
    let (a, b) = (healthy().await, healthy().await);
    let mute = support::h2_server::H2Server::tcp(
        support::h2_server::defaults,
        support::h2_server::handler(|mut stream| async move { stream.wait_reset().await }),
    )
    .await;
    let ch = channel(&[a.addr, b.addr, mute.addr()], &outlier_config(10));
    let timed_call = || {
        ch.unary::<_, SimpleResponse>(
            paths::UNARY_CALL,
            Request::new(SimpleRequest::default()).with_timeout(Duration::from_millis(100)),
        )
    };
    let mut ejected = false;
    for _ in 0..5 {
        for _ in 0..60 {
            if let Err(status) = guarded("unary call", timed_call()).await {
                assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        if !ch.stats().ejected_addresses.is_empty() {
            ejected = true;
            break;
        }
    }
    assert!(ejected, "the mute backend is ejected");
    assert_eq!(ch.stats().ejected_addresses, [mute.addr().to_string()]);
    for _ in 0..30 {
        guarded("unary call", timed_call())
            .await
            .expect("the two others answer");
    }
    // A channel that is shut down lists no ejection.
    ch.close();
    for _ in 0..100 {
        if ch.stats().ejected_addresses.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(ch.stats().ejected_addresses.is_empty());
}

/// Failure percentage over two backends (both must have 5 calls in the interval; half failing ejects),
/// under `policy` for the interop service's methods.
fn two_backends_with(policy: &str) -> String {
    format!(
        r#"{{"loadBalancingConfig":[{{"outlier_detection_experimental":{{
            "interval":"1s","baseEjectionTime":"30s","maxEjectionPercent":50,
            "failurePercentageEjection":{{"threshold":50,"enforcementPercentage":100,
                                          "minimumHosts":2,"requestVolume":5}},
            "childPolicy":[{{"round_robin":{{}}}}]}}}}],
        "methodConfig":[{{"name":[{{"service":"grpc.testing.TestService"}}],{policy}}}]}}"#
    )
}

/// A backend that accepts every call and never answers (it holds each stream until the client resets it).
async fn mute() -> support::h2_server::H2Server {
    support::h2_server::H2Server::tcp(
        support::h2_server::defaults,
        support::h2_server::handler(|mut stream| async move { stream.wait_reset().await }),
    )
    .await
}

/// Rounds of `calls` calls (each must succeed), each followed by a second (a sweep), until something is
/// ejected or `rounds` have passed; what is ejected then.
async fn ejected_after_saved_calls(ch: &Channel, rounds: usize, calls: usize) -> Vec<String> {
    for _ in 0..rounds {
        assert_eq!(failures(ch, calls).await, 0, "every call is saved");
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let ejected = ch.stats().ejected_addresses;
        if !ejected.is_empty() {
            return ejected;
        }
    }
    Vec::new()
}

/// A50 × A44: a backend that takes calls and never answers, whose attempts `perAttemptRecvTimeout` cuts and
/// a retry saves elsewhere. The cut attempts count as failures (CANCELLED, as in C-core), so the backend is
/// ejected and calls stop paying the timeout there.
#[tokio::test(start_paused = true)]
async fn attempts_cut_by_the_per_attempt_recv_timeout_count_and_eject_a_silent_backend() {
    let (good, silent) = (healthy().await, mute().await);
    let config = two_backends_with(
        r#""retryPolicy":{"maxAttempts":2,"initialBackoff":"0.01s","maxBackoff":"0.01s",
            "backoffMultiplier":1,"retryableStatusCodes":["CANCELLED"],"perAttemptRecvTimeout":"0.1s"}"#,
    );
    let ch = channel(&[good.addr, silent.addr()], &config);
    let ejected = ejected_after_saved_calls(&ch, 5, 20).await;
    assert_eq!(
        ejected,
        [silent.addr().to_string()],
        "the silent backend is ejected"
    );
    let retries = || ch.stats().methods.values().map(|m| m.retries).sum::<u64>();
    let (before, opened) = (retries(), silent.opens().len());
    assert_eq!(failures(&ch, 30).await, 0);
    assert_eq!(
        retries(),
        before,
        "no call reaches the ejected backend: no retry"
    );
    assert_eq!(silent.opens().len(), opened, "no stream opens on it");
}

/// Hedging over the same pair. A hedge cancelled because another hedge won says nothing about its backend
/// and does not count (the silent backend keeps its share of first hedges); a hedge cut by its own
/// `perAttemptRecvTimeout` counts, as a retry attempt does.
#[tokio::test(start_paused = true)]
async fn a_losing_hedge_does_not_count_but_a_hedge_cut_by_its_recv_timeout_does() {
    let (good, silent) = (healthy().await, mute().await);
    // The second hedge goes out 50 ms after the first, and wins when the first went to the silent backend.
    let losing = two_backends_with(
        r#""hedgingPolicy":{"maxAttempts":2,"hedgingDelay":"0.05s","nonFatalStatusCodes":[]}"#,
    );
    let ch = channel(&[good.addr, silent.addr()], &losing);
    assert_eq!(
        ejected_after_saved_calls(&ch, 3, 20).await,
        Vec::<String>::new()
    );
    let hedges: u64 = ch.stats().methods.values().map(|m| m.hedges).sum();
    assert!(
        hedges >= 10,
        "the silent backend had its share: {hedges} hedges"
    );

    // The second hedge only after 10 s: the first, cut by its 0.1 s receive timeout, is what sends it.
    let cut = two_backends_with(
        r#""hedgingPolicy":{"maxAttempts":2,"hedgingDelay":"10s","nonFatalStatusCodes":[],
            "perAttemptRecvTimeout":"0.1s"}"#,
    );
    let ch = channel(&[good.addr, silent.addr()], &cut);
    assert_eq!(
        ejected_after_saved_calls(&ch, 5, 20).await,
        [silent.addr().to_string()]
    );
}

/// Going IDLE drops the ejection state with the policy (as grpc-go's and C-core's IDLE shut the LB policy
/// tree down): back from IDLE every address is in service, and a backend still failing is ejected again
/// after an interval with enough calls. The ejection counts in the stats are kept.
#[tokio::test(start_paused = true)]
async fn going_idle_starts_detection_afresh_and_a_failing_backend_is_ejected_again() {
    let (a, b, bad) = (healthy().await, healthy().await, failing().await);
    let ch = Channel::builder(support::ipv4_target(&[a.addr, b.addr, bad.addr]))
        .default_service_config(outlier_config(10))
        .service_config_lookup(false)
        .idle_timeout(Duration::from_secs(60))
        .build()
        .expect("channel");
    until_ejected(&ch).await;
    assert_eq!(ch.stats().ejected_addresses, [bad.addr.to_string()]);

    tokio::time::sleep(Duration::from_secs(61)).await;
    assert_eq!(ch.state(), grpc_channel::ConnectivityState::Idle);
    assert!(
        ch.stats().ejected_addresses.is_empty(),
        "IDLE ejects nothing"
    );
    let failed = failures(&ch, 30).await;
    assert!(
        (5..=15).contains(&failed),
        "back from IDLE the failing backend is in the rotation: {failed} of 30 calls failed"
    );
    until_ejected(&ch).await;
    let stats = ch.stats();
    assert_eq!(stats.ejected_addresses, [bad.addr.to_string()]);
    assert_eq!(
        stats.ejections.get(&bad.addr.to_string()),
        Some(&2),
        "the counts survive IDLE"
    );
}

// ---- Review probes: what a cut attempt counts, and how often ----------------------------------------

/// A backend that answers `UnaryCall` OK, except every `nth` stream (the 1st, the `nth`+1-th, ...), which it
/// holds until the client resets it.
async fn mute_every(nth: usize) -> support::h2_server::H2Server {
    let streams = Arc::new(AtomicUsize::new(0));
    support::h2_server::H2Server::tcp(
        support::h2_server::defaults,
        support::h2_server::handler(move |mut stream| {
            let n = streams.fetch_add(1, Ordering::SeqCst);
            async move {
                if n.is_multiple_of(nth) {
                    stream.wait_reset().await;
                } else {
                    stream.ok(b"");
                }
            }
        }),
    )
    .await
}

/// Failure percentage at `threshold` over two backends needing 10 calls each per interval.
fn two_backends_at(threshold: u32, policy: &str) -> String {
    format!(
        r#"{{"loadBalancingConfig":[{{"outlier_detection_experimental":{{
            "interval":"1s","baseEjectionTime":"30s","maxEjectionPercent":50,
            "failurePercentageEjection":{{"threshold":{threshold},"enforcementPercentage":100,
                                          "minimumHosts":2,"requestVolume":10}},
            "childPolicy":[{{"round_robin":{{}}}}]}}}}],
        "methodConfig":[{{"name":[{{"service":"grpc.testing.TestService"}}],{policy}}}]}}"#
    )
}

/// A cut attempt counts once: a backend that leaves one call in five unanswered (each cut by its 10 ms
/// receive timeout and saved by a retry elsewhere) fails 20 % of its attempts. Counted once, any window
/// of at least 10 of its attempts fails at most 3 in 11 (27 %): never ejected at 30 %, and ejected at
/// 15 % (the cut attempts do count). Counted twice (cut, and again as the stream ends), a full round
/// would fail 12 of 36 (33 %) and be ejected at 30 %.
#[tokio::test(start_paused = true)]
async fn a_cut_attempt_counts_exactly_once() {
    let policy = r#""retryPolicy":{"maxAttempts":2,"initialBackoff":"0.01s","maxBackoff":"0.01s",
        "backoffMultiplier":1,"retryableStatusCodes":["CANCELLED"],"perAttemptRecvTimeout":"0.01s"}"#;
    for (threshold, ejects) in [(15, true), (30, false)] {
        let (good, flaky) = (healthy().await, mute_every(5).await);
        let ch = channel(
            &[good.addr, flaky.addr()],
            &two_backends_at(threshold, policy),
        );
        let ejected = ejected_after_saved_calls(&ch, 5, 60).await;
        if ejects {
            assert_eq!(ejected, [flaky.addr().to_string()], "threshold {threshold}");
        } else {
            assert_eq!(ejected, Vec::<String>::new(), "threshold {threshold}");
            let cut = flaky.resets().len();
            assert!(cut >= 20, "cut attempts: {cut}");
        }
    }
}

/// The application's cancel (a dropped unary call) and the call's own end never count: calls to a silent
/// backend with a 0.1 s receive timeout, each dropped by the application after 50 ms (before the cut), and
/// then calls that succeed elsewhere, never eject it.
#[tokio::test(start_paused = true)]
async fn an_attempt_the_application_gave_up_on_before_its_recv_timeout_does_not_count() {
    let (good, silent) = (healthy().await, mute().await);
    let config = two_backends_with(
        r#""retryPolicy":{"maxAttempts":2,"initialBackoff":"0.01s","maxBackoff":"0.01s",
            "backoffMultiplier":1,"retryableStatusCodes":["CANCELLED"],"perAttemptRecvTimeout":"0.1s"}"#,
    );
    let ch = channel(&[good.addr, silent.addr()], &config);
    for _ in 0..3 {
        for _ in 0..20 {
            let call = ch.unary::<_, SimpleResponse>(
                paths::UNARY_CALL,
                Request::new(SimpleRequest::default()),
            );
            // Given up on after 50 ms: a call on the silent backend is dropped before its cut.
            let _ = tokio::time::timeout(Duration::from_millis(50), call).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(ch.stats().ejected_addresses, Vec::<String>::new());
    }
    assert!(silent.resets().len() >= 20, "{}", silent.resets().len());
}

/// Server settings allowing one stream per connection.
fn one_stream(b: &mut h2::server::Builder) {
    b.max_concurrent_streams(1);
}

const HOLD: &str = "/t.S/Hold";

/// A backend that answers `UnaryCall` OK at once and holds a call to [`HOLD`] until it is reset.
async fn answering(configure: fn(&mut h2::server::Builder)) -> support::h2_server::H2Server {
    support::h2_server::H2Server::tcp(
        configure,
        support::h2_server::handler(|mut stream| async move {
            if stream.path == HOLD {
                stream.wait_reset().await;
            } else {
                stream.ok(b"");
            }
        }),
    )
    .await
}

/// An attempt cut by its receive timeout while it waited in h2's local queue (the server's
/// MAX_CONCURRENT_STREAMS in use by another call of the application) never reached the backend: the
/// transparent-retry rules call it NotSent, and outlier.rs's own reason for counting a cut ("the backend
/// took the call and did not answer in time") does not hold. A backend that answers every call it takes at
/// once is ejected all the same.
#[tokio::test(start_paused = true)]
async fn an_attempt_cut_while_queued_behind_the_stream_limit_does_not_eject_a_healthy_backend() {
    let (roomy, narrow) = (
        answering(support::h2_server::defaults).await,
        answering(one_stream).await,
    );
    let config = two_backends_with(
        r#""retryPolicy":{"maxAttempts":2,"initialBackoff":"0.01s","maxBackoff":"0.01s",
            "backoffMultiplier":1,"retryableStatusCodes":["CANCELLED"],"perAttemptRecvTimeout":"0.1s"}"#,
    );
    let ch = channel(&[roomy.addr(), narrow.addr()], &config);
    // Both in the rotation, then one long call on each (round_robin alternates).
    assert_eq!(failures(&ch, 4).await, 0);
    let mut held = Vec::new();
    for _ in 0..2 {
        let ch = ch.clone();
        held.push(tokio::spawn(async move {
            ch.unary_raw(HOLD, Request::new(bytes::Bytes::new())).await
        }));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!((roomy.opens_of(HOLD), narrow.opens_of(HOLD)), (1, 1));
    let ejected = ejected_after_saved_calls(&ch, 3, 20).await;
    let opened = narrow.opens_of(paths::UNARY_CALL);
    assert_eq!(
        ejected,
        Vec::<String>::new(),
        "a backend that answered OK every one of the {opened} UnaryCall streams that reached it"
    );
    drop(held);
}
