//! Telemetry of unary and server-streaming calls dropped
//! at each await point (while resolving, before commit, during a retry's backoff, after commit). Each call
//! has one `grpc.call` span finished CANCELLED, one `grpc.client.call.duration` sample, and each attempt one
//! span whose outcome is recorded once and one `grpc.client.attempt.duration` sample. (Its own test binary,
//! one test: tracing caches callsite interest per process.)

mod support;

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Request, ResolverOptions};
use grpc_feature_tests::testing::{
    ResponseParameters, StreamingOutputCallRequest, StreamingOutputCallResponse,
};
use interop::faulty::{methods, FaultyServer};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use support::spans::{Capture, SeenSpan};
use tracing_subscriber::layer::SubscriberExt;

const STREAMING_OUTPUT_CALL: &str = "/grpc.testing.TestService/StreamingOutputCall";

/// Retries of every `fault.Faulty` method on UNAVAILABLE.
const RETRY: &str = r#"{"methodConfig":[{"name":[{"service":"fault.Faulty"}],"retryPolicy":{"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}"#;

async fn give_up<F: std::future::Future>(after: Duration, f: F) {
    assert!(
        tokio::time::timeout(after, f).await.is_err(),
        "the call was meant to be still running"
    );
}

// Failed before the fix (`Drop for retry_driver::Run`): a unary call dropped before it committed (waiting
// for the response headers, or in a retry's backoff) finished its `grpc.call` span with `grpc.attempts = 0`
// although it made an attempt (whose span is there).
#[tokio::test(start_paused = true)]
async fn calls_dropped_at_each_await_point_are_traced_and_measured_once() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _metrics = metrics::set_default_local_recorder(&recorder);

    let server = FaultyServer::start().await.expect("server");
    let ch = Channel::builder(format!("ipv4:{}", server.addr))
        .default_service_config(RETRY)
        .service_config_lookup(false)
        .build()
        .expect("channel");

    // Before commit: the server never answers.
    give_up(
        Duration::from_secs(1),
        ch.unary_raw(methods::SILENT, Request::new(Bytes::new())),
    )
    .await;

    // During the backoff: the first attempt fails with a pushback of 5 s.
    let mut request = Request::new(Bytes::new());
    for (k, v) in [
        ("x-test-key", "backoff"),
        ("x-fail-times", "1"),
        ("x-pushback-ms", "5000"),
    ] {
        request.metadata_mut().append(k, v).expect("header");
    }
    give_up(
        Duration::from_secs(1),
        ch.unary_raw(methods::FLAKY, request),
    )
    .await;

    // After commit: a server stream whose second message comes a minute later, dropped after the first.
    let interop = support::interop_server().await;
    let ich = Channel::builder(format!("ipv4:{interop}"))
        .build()
        .expect("channel");
    let slow = StreamingOutputCallRequest {
        response_parameters: vec![
            ResponseParameters {
                size: 10,
                ..Default::default()
            },
            ResponseParameters {
                size: 10,
                interval_us: 60_000_000,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let response = tokio::time::timeout(
        Duration::from_secs(5),
        ich.server_streaming::<_, StreamingOutputCallResponse>(
            STREAMING_OUTPUT_CALL,
            Request::new(slow),
        ),
    )
    .await
    .expect("no hang")
    .expect("headers");
    let mut stream = response.into_message();
    assert!(stream.message().await.expect("first").is_some());
    drop(stream);

    // While resolving: a DNS server that never answers.
    let (_socket, silent) = interop::dns::silent().await.expect("socket");
    let dch = Channel::builder(format!("dns://{silent}/svc.test:1"))
        .resolver_options(ResolverOptions::default().with_query_timeout(Duration::from_secs(30)))
        .build()
        .expect("channel");
    give_up(
        Duration::from_secs(1),
        dch.unary_raw("/resolving.S/M", Request::new(Bytes::new())),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    // ---- Spans ----
    let spans: Vec<SeenSpan> = capture.spans();
    let call_span = |method: &str| -> SeenSpan {
        let found: Vec<&SeenSpan> = spans
            .iter()
            .filter(|s| {
                s.name == "grpc.call"
                    && s.fields.get("grpc.method").map(String::as_str) == Some(method)
            })
            .collect();
        assert_eq!(
            found.len(),
            1,
            "one grpc.call span for {method}: {spans:#?}"
        );
        found[0].clone()
    };
    let mut problems = Vec::new();
    for (method, attempts) in [
        ("fault.Faulty/Silent", "1"),
        ("fault.Faulty/Flaky", "1"),
        (STREAMING_OUTPUT_CALL.trim_start_matches('/'), "1"),
        ("resolving.S/M", "0"),
    ] {
        let span = call_span(method);
        if span.fields.get("grpc.status").map(String::as_str) != Some("CANCELLED")
            || span.records.get("grpc.status") != Some(&1)
        {
            problems.push(format!(
                "{method}: status {:?}",
                span.fields.get("grpc.status")
            ));
        }
        if span.fields.get("grpc.attempts").map(String::as_str) != Some(attempts) {
            problems.push(format!(
                "{method}: grpc.attempts {:?}, expected {attempts}",
                span.fields.get("grpc.attempts")
            ));
        }
    }
    let attempts: Vec<&SeenSpan> = spans.iter().filter(|s| s.name == "grpc.attempt").collect();
    assert_eq!(attempts.len(), 3, "{attempts:#?}");
    for attempt in &attempts {
        assert_eq!(attempt.records.get("grpc.outcome"), Some(&1), "{attempt:?}");
    }

    // ---- Metrics ----
    let mut calls: HashMap<String, Vec<(String, usize)>> = HashMap::new();
    let mut attempt_samples: HashMap<String, Vec<(String, usize)>> = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let (_, key) = key.into_parts();
        let label = |name: &str| {
            key.labels()
                .find(|l| l.key() == name)
                .map(|l| l.value().to_owned())
                .unwrap_or_default()
        };
        let n = match value {
            DebugValue::Histogram(h) => h.len(),
            _ => continue,
        };
        let into = match key.name() {
            "grpc.client.call.duration" => &mut calls,
            "grpc.client.attempt.duration" => &mut attempt_samples,
            _ => continue,
        };
        into.entry(label("grpc.method"))
            .or_default()
            .push((label("grpc.status"), n));
    }
    for method in [
        "fault.Faulty/Silent",
        "fault.Faulty/Flaky",
        STREAMING_OUTPUT_CALL.trim_start_matches('/'),
        "resolving.S/M",
    ] {
        assert_eq!(
            calls.get(method),
            Some(&vec![("CANCELLED".to_owned(), 1)]),
            "{method}: {calls:?}"
        );
    }
    assert_eq!(
        attempt_samples.get("fault.Faulty/Silent"),
        Some(&vec![("CANCELLED".to_owned(), 1)]),
        "{attempt_samples:?}"
    );
    assert_eq!(
        attempt_samples.get("fault.Faulty/Flaky"),
        Some(&vec![("UNAVAILABLE".to_owned(), 1)]),
        "{attempt_samples:?}"
    );
    assert_eq!(
        attempt_samples
            .get(STREAMING_OUTPUT_CALL.trim_start_matches('/'))
            .map(|v| v.iter().map(|(_, n)| n).sum::<usize>()),
        Some(1),
        "{attempt_samples:?}"
    );
    assert!(problems.is_empty(), "{problems:#?}");
}
