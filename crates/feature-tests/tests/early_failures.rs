//! Telemetry covers every call, also one that fails before its first attempt: refused by an interceptor,
//! failed by resolution (a real DNS server on loopback answering NXDOMAIN), out of time while waiting for
//! resolution, or made on a closed channel. Each has its `grpc.call` span with its status and 0 attempts,
//! counts in `Channel::stats()`, and records `grpc.client.call.duration`. And an attempt span records its
//! outcome once, also for the attempt the call committed to. (Its own test binary, one test: tracing caches
//! callsite interest per process.)

mod support;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{CallInfo, Channel, Code, Request, ResolverOptions, Status};
use interop::dns::TestDns;
use interop::faulty::FaultyServer;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use support::spans::{Capture, SeenSpan};
use tracing_subscriber::layer::SubscriberExt;

const INTERCEPTED: &str = "/early.Test/Intercepted";
const UNRESOLVED: &str = "/early.Test/Unresolved";
const LATE: &str = "/early.Test/Late";
const CLOSED: &str = "/early.Test/Closed";

async fn call(channel: &Channel, path: &str, request: Request<Bytes>) -> Status {
    tokio::time::timeout(Duration::from_secs(60), channel.unary_raw(path, request))
        .await
        .expect("no hang")
        .expect_err("the call fails before any attempt")
}

#[tokio::test(start_paused = true)]
async fn calls_that_fail_before_any_attempt_are_traced_counted_and_measured() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _metrics = metrics::set_default_local_recorder(&recorder);

    let server = FaultyServer::start().await.expect("server");
    let dns = TestDns::start().await.expect("dns");
    dns.add_a("svc.test", Ipv4Addr::LOCALHOST).await;

    // Refused by an interceptor: nothing is sent.
    let refusing = Channel::builder(format!("ipv4:{}", server.addr))
        .interceptor(|_: &mut CallInfo<'_>| -> Result<(), Status> {
            Err(Status::new(Code::PermissionDenied, "no token"))
        })
        .build()
        .expect("channel");
    let status = call(&refusing, INTERCEPTED, Request::new(Bytes::new())).await;
    assert_eq!(status.code(), Code::PermissionDenied);

    // A name the DNS server does not know: resolution fails; a wait-for-ready call waits through the
    // failure until its deadline.
    let unresolved = Channel::builder(format!("dns://{}/missing.test:{}", dns.addr, 1))
        .resolver_options(ResolverOptions::default().with_query_timeout(Duration::from_secs(2)))
        .build()
        .expect("channel");
    let status = call(&unresolved, UNRESOLVED, Request::new(Bytes::new())).await;
    assert_eq!(status.code(), Code::Unavailable, "{status}");
    let late = Request::new(Bytes::new())
        .with_wait_for_ready(true)
        .with_timeout(Duration::from_secs(5));
    let status = call(&unresolved, LATE, late).await;
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");

    // A closed channel.
    let closed = Channel::builder(format!(
        "dns://{}/svc.test:{}",
        dns.addr,
        server.addr.port()
    ))
    .build()
    .expect("channel");
    closed.close();
    let status = call(&closed, CLOSED, Request::new(Bytes::new())).await;
    assert_eq!(status.code(), Code::Unavailable, "{status}");

    // One call retried twice, for the attempt spans.
    let retried = support::retried_call(&server).await;

    // Spans: one per call, with its status and 0 attempts.
    let spans: Vec<SeenSpan> = capture.spans();
    let call_span = |path: &str| -> &SeenSpan {
        let method = path.trim_start_matches('/');
        let found: Vec<&SeenSpan> = spans
            .iter()
            .filter(|s| {
                s.name == "grpc.call"
                    && s.fields.get("grpc.method").map(String::as_str) == Some(method)
            })
            .collect();
        assert_eq!(found.len(), 1, "one grpc.call span for {path}: {spans:#?}");
        found[0]
    };
    for (path, code) in [
        (INTERCEPTED, "PERMISSION_DENIED"),
        (UNRESOLVED, "UNAVAILABLE"),
        (LATE, "DEADLINE_EXCEEDED"),
        (CLOSED, "UNAVAILABLE"),
    ] {
        let span = call_span(path);
        assert_eq!(
            span.fields.get("grpc.status").map(String::as_str),
            Some(code),
            "{path}: {span:?}"
        );
        assert_eq!(
            span.fields.get("grpc.attempts").map(String::as_str),
            Some("0"),
            "{path}: {span:?}"
        );
    }
    // Attempt spans: each outcome recorded once, the committed attempt's included.
    let attempts: Vec<&SeenSpan> = spans.iter().filter(|s| s.name == "grpc.attempt").collect();
    assert_eq!(attempts.len(), 3, "{attempts:#?}");
    for attempt in &attempts {
        assert_eq!(attempt.records.get("grpc.outcome"), Some(&1), "{attempt:?}");
    }
    let committed: Vec<&&SeenSpan> = attempts
        .iter()
        .filter(|a| a.fields.get("grpc.committed").map(String::as_str) == Some("true"))
        .collect();
    assert_eq!(committed.len(), 1, "{attempts:#?}");
    assert_eq!(committed[0].fields["grpc.outcome"], "OK");

    // Stats: every call counted, per method too.
    let failed_stats = [&refusing, &unresolved, &closed].map(|c| c.stats());
    assert_eq!(
        (failed_stats[0].calls_started, failed_stats[0].calls_failed),
        (1, 1)
    );
    assert_eq!(
        (failed_stats[1].calls_started, failed_stats[1].calls_failed),
        (2, 2)
    );
    assert_eq!(
        (failed_stats[2].calls_started, failed_stats[2].calls_failed),
        (1, 1)
    );
    assert_eq!(failed_stats[0].attempts_started, 0);
    assert_eq!(failed_stats[1].methods[LATE].calls, 1);
    assert_eq!(retried.stats().calls_succeeded, 1);

    // grpc.client.call.duration for each, with its status.
    let mut durations: HashMap<String, String> = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let (_, key) = key.into_parts();
        if key.name() != "grpc.client.call.duration" {
            continue;
        }
        let label = |name: &str| {
            key.labels()
                .find(|l| l.key() == name)
                .map(|l| l.value().to_owned())
                .unwrap_or_default()
        };
        assert!(matches!(value, DebugValue::Histogram(h) if h.len() == 1));
        durations.insert(label("grpc.method"), label("grpc.status"));
    }
    for (path, code) in [
        (INTERCEPTED, "PERMISSION_DENIED"),
        (UNRESOLVED, "UNAVAILABLE"),
        (LATE, "DEADLINE_EXCEEDED"),
        (CLOSED, "UNAVAILABLE"),
    ] {
        assert_eq!(
            durations
                .get(path.trim_start_matches('/'))
                .map(String::as_str),
            Some(code),
            "{durations:?}"
        );
    }
}
