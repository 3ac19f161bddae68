//! Outlier detection's ejections and returns show in tracing events (address, cause, duration).
//!
//! Runs alone, as every test of this binary does: `tracing` caches each callsite's interest, and a test
//! running in parallel that reaches the same callsite first, while this test installs its subscriber,
//! can leave the callsite disabled for it.

use grpc_test_support as support;

use std::time::Duration;

use grpc_channel::{Channel, Request};
use interop::server;
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use support::guards::guarded;
use support::tracing_capture;

#[tokio::test(start_paused = true)]
async fn ejections_and_returns_are_traced_with_address_cause_and_duration() {
    let (capture, _installed) = tracing_capture::install().await;
    let mut addrs = Vec::new();
    let mut servers = Vec::new();
    for _ in 0..2 {
        let s = server::start("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("server");
        addrs.push(s.addr);
        servers.push(s);
    }
    let bad = support::faulty_server().await;
    addrs.push(bad.addr);
    let config = r#"{"loadBalancingConfig":[{"outlier_detection_experimental":{
            "interval":"1s","baseEjectionTime":"5s",
            "failurePercentageEjection":{"threshold":50,"enforcementPercentage":100,
                                         "minimumHosts":3,"requestVolume":10},
            "childPolicy":[{"round_robin":{}}]}}]}"#;
    let ch: Channel = support::channel_with_config(&support::ipv4_target(&addrs), config);
    for _ in 0..60 {
        let _ = guarded(
            "unary call",
            ch.unary::<_, SimpleResponse>(
                paths::UNARY_CALL,
                Request::new(SimpleRequest::default()),
            ),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(7)).await;
    let events = capture.lines_containing("outlier detection");
    assert_eq!(events.len(), 2, "{events:#?}");
    let bad = bad.addr.to_string();
    let ejected = &events[0];
    assert!(ejected.contains("ejects the address"), "{ejected}");
    assert!(ejected.contains(&format!("address={bad}")), "{ejected}");
    assert!(ejected.contains("cause=FailurePercentage"), "{ejected}");
    assert!(ejected.contains("duration=Some(5s)"), "{ejected}");
    let returned = &events[1];
    assert!(returned.contains("returns the address"), "{returned}");
    assert!(returned.contains(&format!("address={bad}")), "{returned}");
    assert!(returned.contains("reason=Expired"), "{returned}");
    assert!(returned.contains("ejected_for=Some("), "{returned}");
}

/// A backend failing every call, but with fewer calls per interval than `requestVolume`, is not ejected:
/// each sweep says so, once per address, naming its count and the threshold.
#[tokio::test(start_paused = true)]
async fn a_sweep_says_why_a_failing_address_was_not_ejected() {
    let (capture, _installed) = tracing_capture::install().await;
    let mut addrs = Vec::new();
    let mut servers = Vec::new();
    for _ in 0..2 {
        let s = server::start("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("server");
        addrs.push(s.addr);
        servers.push(s);
    }
    let bad = support::faulty_server().await;
    addrs.push(bad.addr);
    let config = r#"{"loadBalancingConfig":[{"outlier_detection_experimental":{
            "interval":"1s","baseEjectionTime":"5s",
            "failurePercentageEjection":{"threshold":50,"enforcementPercentage":100,
                                         "minimumHosts":3,"requestVolume":100},
            "childPolicy":[{"round_robin":{}}]}}]}"#;
    let ch: Channel = support::channel_with_config(&support::ipv4_target(&addrs), config);
    // 30 calls in the first interval: 10 per address, all failing on the bad one.
    for _ in 0..30 {
        let _ = guarded(
            "unary call",
            ch.unary::<_, SimpleResponse>(
                paths::UNARY_CALL,
                Request::new(SimpleRequest::default()),
            ),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let notes = capture.lines_containing("did not eject");
    assert_eq!(
        notes.len(),
        1,
        "one event, for the failing address: {notes:#?}"
    );
    let note = &notes[0];
    let bad = bad.addr.to_string();
    assert!(note.contains(&format!("address={bad}")), "{note}");
    assert!(note.contains("level=DEBUG"), "{note}");
    // 10 calls each once all three connections are READY (round_robin); the count is in the message.
    assert!(
        note.contains("failurePercentageEjection: ")
            && note.contains(" calls in the interval, below requestVolume 100"),
        "{note}"
    );
    assert!(note.contains("per interval"), "{note}");
    assert!(capture.lines_containing("ejects the address").is_empty());
}
