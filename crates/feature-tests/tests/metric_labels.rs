//! The A66/A96 metric labels: `grpc.method` as A66 writes it (`package.Service/Method`).

use bytes::Bytes;
use grpc_channel::{Channel, Request};
use interop::faulty::{methods, FaultyServer};
use metrics_util::debugging::DebuggingRecorder;

/// DEFECT: gRFC A66 defines `grpc.method` as the full method name WITHOUT the leading slash
/// (`google.bigtable.v2.Bigtable/CheckAndMutateRow`; grpc-go strips it with `removeLeadingSlash`, grpc-java
/// uses `MethodDescriptor.getFullMethodName()`). The channel labels every instrument with the HTTP/2 path,
/// `/fault.Faulty/Flaky`, so its series do not join other gRPC implementations' dashboards. (The existing
/// `metrics.rs` asserts the slashed form.) Also: A66 uses "other" for methods the client does not know
/// (generic calls) to bound cardinality; here any path (`unary_raw`, the tower adapter) becomes a label.
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
