//! Metrics of a retried call, against the fault-injecting server over real loopback sockets on tokio's
//! paused clock: the gRFC A66/A96 instruments with their labels (`grpc.method` as A66 writes it), through a
//! test recorder, and `Channel::stats()`.

use grpc_test_support as support;

use std::collections::HashMap;

use bytes::Bytes;
use grpc_channel::{Channel, Request};
use interop::faulty::{methods, FaultyServer};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use support::flaky::retried_call;

/// One recorded series: its labels and value.
type Recorded = (Vec<(String, String)>, DebugValue);

#[tokio::test(start_paused = true)]
async fn a96_and_a66_instruments_and_channel_stats() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let server = FaultyServer::start().await.expect("server");
    let channel = retried_call(&server).await;

    let stats = channel.stats();
    assert_eq!(
        (
            stats.calls_started,
            stats.calls_succeeded,
            stats.calls_failed,
            stats.attempts_started
        ),
        (1, 1, 0, 3)
    );
    let method = &stats.methods[methods::FLAKY];
    assert_eq!((method.calls, method.attempts, method.retries), (1, 3, 2));
    assert_eq!(
        method.failed_retries, 1,
        "the first retry failed, the second did not"
    );

    let target = format!("ipv4:{}", server.addr);
    let mut seen: HashMap<String, Vec<Recorded>> = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let (_, key) = key.into_parts();
        let labels = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        seen.entry(key.name().to_owned())
            .or_default()
            .push((labels, value));
    }
    let one = |name: &str| -> &Recorded {
        let entries = seen
            .get(name)
            .unwrap_or_else(|| panic!("{name} recorded: {seen:#?}"));
        &entries[0]
    };
    let has = |labels: &[(String, String)], k: &str, v: &str| {
        labels.iter().any(|(lk, lv)| lk == k && lv == v)
    };
    let (labels, value) = one("grpc.client.attempt.started");
    assert!(
        has(
            labels,
            "grpc.method",
            methods::FLAKY.trim_start_matches('/')
        ) && has(labels, "grpc.target", &target)
    );
    assert_eq!(*value, DebugValue::Counter(3));
    // Attempt durations: two UNAVAILABLE, one OK.
    let durations = &seen["grpc.client.attempt.duration"];
    let count = |status: &str| -> usize {
        durations
            .iter()
            .filter(|(l, _)| has(l, "grpc.status", status))
            .map(|(_, v)| match v {
                DebugValue::Histogram(h) => h.len(),
                _ => 0,
            })
            .sum()
    };
    assert_eq!((count("UNAVAILABLE"), count("OK")), (2, 1));
    let (labels, _) = one("grpc.client.call.duration");
    assert!(has(labels, "grpc.status", "OK"));
    let (labels, value) = one("grpc.client.call.retries");
    assert!(has(
        labels,
        "grpc.method",
        methods::FLAKY.trim_start_matches('/')
    ));
    assert!(matches!(value, DebugValue::Histogram(h) if h.len() == 1 && h[0].into_inner() == 2.0));
    assert!(seen.contains_key("grpc.client.call.retry_delay"));
    // A96: no hedges and no transparent retries, so nothing recorded for them.
    assert!(!seen.contains_key("grpc.client.call.hedges"));
    assert!(!seen.contains_key("grpc.client.call.transparent_retries"));
}

/// Every instrument's `grpc.method` label is the full method name as gRFC A66 defines it, without the leading
/// slash (`google.bigtable.v2.Bigtable/CheckAndMutateRow`; grpc-go strips it with `removeLeadingSlash`,
/// grpc-java uses `MethodDescriptor.getFullMethodName()`), so the series join other gRPC implementations'
/// dashboards. The failure this guards against: the label was the HTTP/2 path, `/fault.Faulty/Flaky`. (Not
/// checked here: A66 uses "other" for methods the client does not know, to bound cardinality; any path
/// given to `unary_raw` or the tower adapter becomes a label.)
#[tokio::test(start_paused = true)]
async fn a66_method_label_has_no_leading_slash() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let server = FaultyServer::start().await.expect("server");
    let channel = Channel::new(format!("ipv4:{}", server.addr)).expect("channel");
    let mut request = Request::new(Bytes::new());
    request
        .metadata_mut()
        .append("x-test-key", "label")
        .expect("key");
    channel
        .unary_raw(methods::FLAKY, request)
        .await
        .expect("call");
    let mut methods_seen = Vec::new();
    for (key, _, _, _) in snapshotter.snapshot().into_vec() {
        let (_, key) = key.into_parts();
        for l in key.labels() {
            if l.key() == "grpc.method" {
                methods_seen.push((key.name().to_owned(), l.value().to_owned()));
            }
        }
    }
    assert!(!methods_seen.is_empty());
    for (name, value) in &methods_seen {
        assert_eq!(
            value, "fault.Faulty/Flaky",
            "{name}: A66's grpc.method has no leading slash"
        );
    }
}
