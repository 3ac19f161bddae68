//! Tracing spans of a retried call, against the fault-injecting server over real loopback sockets on
//! tokio's paused clock: one `grpc.call` span and one `grpc.attempt` span per attempt (its child), with their
//! fields. (Its own test binary: tracing caches callsite interest per process, and a test without a
//! subscriber running in parallel would disable the callsites for this one.)

use grpc_test_support as support;

use interop::faulty::FaultyServer;
use support::flaky::retried_call;
use support::spans::{Capture, SeenSpan};
use tracing_subscriber::layer::SubscriberExt;

#[tokio::test(start_paused = true)]
async fn a_retried_call_has_one_call_span_and_a_span_per_attempt() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let server = FaultyServer::start().await.expect("server");
    let channel = retried_call(&server).await;
    drop(channel);

    let spans: Vec<SeenSpan> = capture.spans();
    let calls: Vec<&SeenSpan> = spans.iter().filter(|s| s.name == "grpc.call").collect();
    assert_eq!(calls.len(), 1, "{spans:#?}");
    let call = calls[0];
    assert_eq!(call.fields["grpc.method"], "fault.Faulty/Flaky");
    assert_eq!(call.fields["grpc.target"], format!("ipv4:{}", server.addr));
    assert_eq!(call.fields["grpc.status"], "OK");
    assert_eq!(call.fields["grpc.attempts"], "3");
    assert_eq!(call.fields["retry.policy"], "service_config");

    let mut attempts: Vec<&SeenSpan> = spans.iter().filter(|s| s.name == "grpc.attempt").collect();
    attempts.sort_by_key(|s| s.fields["grpc.attempt"].parse::<u32>().unwrap_or(0));
    assert_eq!(attempts.len(), 3, "{spans:#?}");
    for (i, attempt) in attempts.iter().enumerate() {
        assert_eq!(attempt.parent.as_deref(), Some("grpc.call"));
        assert_eq!(attempt.fields["grpc.attempt"], (i + 1).to_string());
        assert_eq!(attempt.fields["grpc.transparent"], "false");
        assert_eq!(attempt.fields["grpc.peer"], server.addr.to_string());
    }
    assert_eq!(attempts[0].fields["grpc.outcome"], "UNAVAILABLE");
    assert_eq!(attempts[1].fields["grpc.outcome"], "UNAVAILABLE");
    assert_eq!(attempts[2].fields["grpc.outcome"], "OK");
    assert_eq!(attempts[0].fields["grpc.delay_ms"], "0");
    // Retries come after a backoff with no attempt in flight: jittered, never above maxBackoff (1 s).
    for attempt in &attempts[1..] {
        let delay: u64 = attempt.fields["grpc.delay_ms"].parse().expect("number");
        assert!(delay <= 1000, "{delay}");
    }
}

/// The public observability page (crates/channel/src/observability.rs, the `grpc.call` bullet) tells users
/// that the span field `grpc.method` is `/package.Service/Method`, and dashboards and log queries are written
/// against that page. The span records the path without its leading slash (call/telemetry.rs `call`:
/// `uri.path().trim_start_matches('/')`), A66's metric label form: a query for `grpc.method="/fault.Faulty/Flaky"`
/// matches nothing. The page must describe the value the span carries.
#[tokio::test(start_paused = true)]
async fn the_observability_page_gives_the_grpc_method_span_field_as_recorded() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let server = FaultyServer::start().await.expect("server");
    let channel = retried_call(&server).await;
    drop(channel);

    let spans: Vec<SeenSpan> = capture.spans();
    let call = spans
        .iter()
        .find(|s| s.name == "grpc.call")
        .expect("a grpc.call span");
    let recorded = &call.fields["grpc.method"];
    let page = include_str!("../../channel/src/observability.rs");
    let documented_with_slash = page.contains("`grpc.method` (`/package.Service/Method`)");
    assert_eq!(
        documented_with_slash,
        recorded.starts_with('/'),
        "observability.rs documents the grpc.call span's grpc.method as `/package.Service/Method`; the span \
         records {recorded:?}"
    );
}
