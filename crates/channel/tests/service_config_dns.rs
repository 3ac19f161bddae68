//! The channel resolving through a real DNS server on loopback, with the service config from a TXT record:
//! the method config's `timeout`, `waitForReady` and message size limits apply to calls (gRFC A2, A21), and
//! so does its retry policy, to a streaming call.

mod support;

use std::net::Ipv4Addr;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, ConnectivityState, Request, ResolverOptions};
use http::HeaderValue;
use interop::dns::TestDns;
use interop::faulty::methods;
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use support::config::retry;
use support::frames::{deframe, grpc_message};
use support::guards::guarded;
use support::h2_server::{defaults, handler, trailers, H2Server, Stream, SVC};
use tokio::time::Instant;

const HOST: &str = "svc.test";

async fn dns_with(config: Option<&str>) -> TestDns {
    let dns = TestDns::start().await.expect("dns");
    dns.add_a(HOST, Ipv4Addr::LOCALHOST).await;
    if let Some(c) = config {
        dns.set_service_config(HOST, c).await;
    }
    dns
}

fn channel(dns: &TestDns, port: u16) -> Channel {
    Channel::builder(format!("dns://{}/{HOST}:{port}", dns.addr))
        .resolver_options(ResolverOptions::default().with_query_timeout(Duration::from_secs(2)))
        .build()
        .expect("channel")
}

#[tokio::test(start_paused = true)]
async fn the_call_timeout_comes_from_the_txt_record() {
    let server = support::faulty_server().await;
    let dns = dns_with(Some(
        r#"[{"clientLanguage":["rust"],"serviceConfig":{"methodConfig":[{"name":[{"service":"fault.Faulty"}],"timeout":"2.5s"}]}}]"#,
    ))
    .await;
    let ch = channel(&dns, server.addr.port());

    // The server sees the config's timeout as grpc-timeout...
    let echoed = ch
        .unary_raw(methods::ECHO_HEADERS, Request::new(Bytes::new()))
        .await
        .expect("call");
    let header = echoed
        .trailers()
        .get("x-seen-grpc-timeout")
        .expect("grpc-timeout sent");
    let sent = grpc_channel::timeout::decode(header.as_bytes()).expect("valid");
    assert!(
        sent <= Duration::from_millis(2500) && sent > Duration::from_millis(2400),
        "{header}"
    );

    // ...and the client enforces it: a call with no timeout of its own ends DEADLINE_EXCEEDED at 2.5 s.
    let start = Instant::now();
    let status = ch
        .unary_raw(methods::SILENT, Request::new(Bytes::new()))
        .await
        .expect_err("silent server");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(2500) && elapsed < Duration::from_millis(2600),
        "{elapsed:?}"
    );

    // The call's own shorter timeout wins.
    let start = Instant::now();
    let status = ch
        .unary_raw(
            methods::SILENT,
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(1)),
        )
        .await
        .expect_err("silent server");
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert!(
        start.elapsed() < Duration::from_millis(1100),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn message_size_limits_come_from_the_txt_record() {
    let addr = support::interop_server().await;
    let dns = dns_with(Some(
        r#"[{"serviceConfig":{"methodConfig":[{"name":[{"service":"grpc.testing.TestService","method":"UnaryCall"}],"maxResponseMessageBytes":1000,"maxRequestMessageBytes":500}]}}]"#,
    ))
    .await;
    let ch = channel(&dns, addr.port());
    let big_response = SimpleRequest {
        response_size: 2000,
        ..Default::default()
    };
    let status = ch
        .unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(big_response))
        .await
        .expect_err("response over the config's limit");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let big_request = SimpleRequest {
        payload: Some(interop_proto::Payload {
            r#type: 0,
            body: Bytes::from(vec![0; 600]),
        }),
        ..Default::default()
    };
    let status = ch
        .unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(big_request))
        .await
        .expect_err("request over the config's limit");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let ok = SimpleRequest {
        response_size: 900,
        ..Default::default()
    };
    ch.unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(ok))
        .await
        .expect("within the limits");
}

#[tokio::test(start_paused = true)]
async fn wait_for_ready_comes_from_the_txt_record_and_the_api_overrides_it() {
    let (_held, free) = support::reserved_port();
    let dns = dns_with(Some(
        r#"[{"serviceConfig":{"methodConfig":[{"name":[{}],"waitForReady":true,"timeout":"3s"}]}}]"#,
    ))
    .await;
    let ch = channel(&dns, free.port());
    // The config says wait: the call waits for a server until its (config) deadline.
    let start = Instant::now();
    let status = ch
        .unary_raw("/a.B/C", Request::new(Bytes::new()))
        .await
        .expect_err("nothing listens");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(start.elapsed() >= Duration::from_secs(3));
    // The API says fail fast: it fails at once.
    let start = Instant::now();
    let status = ch
        .unary_raw(
            "/a.B/C",
            Request::new(Bytes::new()).with_wait_for_ready(false),
        )
        .await
        .expect_err("nothing listens");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(start.elapsed() < Duration::from_millis(100));
}

#[tokio::test]
async fn a_first_config_that_is_bad_fails_the_channel_unless_there_is_a_default() {
    let addr = support::interop_server().await;
    let bad = r#"[{"serviceConfig":{"retryThrottling":{"maxTokens":5000,"tokenRatio":1}}}]"#;
    let dns = dns_with(Some(bad)).await;
    let ch = channel(&dns, addr.port());
    let status = ch
        .unary::<_, interop_proto::Empty>(paths::EMPTY_CALL, Request::new(interop_proto::Empty {}))
        .await
        .expect_err("resolution failed");
    assert_eq!(status.code(), Code::Unavailable);
    assert!(
        status
            .message()
            .contains("$[0].serviceConfig.retryThrottling.maxTokens"),
        "{status:?}"
    );

    let with_default = Channel::builder(format!("dns://{}/{HOST}:{}", dns.addr, addr.port()))
        .default_service_config(r#"{"methodConfig":[{"name":[{}],"timeout":"30s"}]}"#)
        .build()
        .expect("channel");
    with_default
        .unary::<_, interop_proto::Empty>(paths::EMPTY_CALL, Request::new(interop_proto::Empty {}))
        .await
        .expect("the default config is used");
}

#[tokio::test]
async fn service_config_lookup_can_be_turned_off() {
    let server = support::faulty_server().await;
    let dns = dns_with(Some(
        r#"[{"serviceConfig":{"methodConfig":[{"name":[{}],"timeout":"0.001s"}]}}]"#,
    ))
    .await;
    let ch = Channel::builder(format!("dns://{}/{HOST}:{}", dns.addr, server.addr.port()))
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let r = ch
        .unary_raw(methods::ECHO_HEADERS, Request::new(Bytes::new()))
        .await
        .expect("no 1 ms timeout from DNS");
    assert_eq!(r.trailers().get("x-seen-grpc-timeout"), None);
}

/// Waits (bounded) until the channel's state is `want`, through `wait_for_state_change`.
async fn state_becomes(ch: &Channel, want: ConnectivityState, within: Duration) {
    let deadline = Instant::now() + within;
    let mut state = ch.state();
    while state != want {
        let next = ch.wait_for_state_change(state, deadline).await;
        assert!(
            next != state || Instant::now() < deadline,
            "still {state:?}, wanted {want:?}"
        );
        state = next;
    }
}

async fn empty_call(ch: &Channel) -> Result<(), grpc_channel::Status> {
    ch.unary::<_, interop_proto::Empty>(paths::EMPTY_CALL, Request::new(interop_proto::Empty {}))
        .await
        .map(drop)
}

#[tokio::test(start_paused = true)]
async fn a_bad_first_config_is_retried_with_backoff_and_a_fixed_record_is_used_without_restart() {
    let addr = support::interop_server().await;
    let bad = r#"[{"serviceConfig":{"retryThrottling":{"maxTokens":5000,"tokenRatio":1}}}]"#;
    let dns = dns_with(Some(bad)).await;
    let ch = channel(&dns, addr.port());

    // A21: the channel never had a valid config: calls fail UNAVAILABLE with the parse error, and the
    // channel is in TRANSIENT_FAILURE.
    let status = empty_call(&ch).await.expect_err("resolution failed");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status
            .message()
            .contains("$[0].serviceConfig.retryThrottling.maxTokens"),
        "{status:?}"
    );
    state_becomes(
        &ch,
        ConnectivityState::TransientFailure,
        Duration::from_secs(1),
    )
    .await;

    // The resolver keeps trying (backoff 1 s, 1.6 s, 2.56 s, ...): still the same error while the record is bad.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let status = empty_call(&ch).await.expect_err("still bad");
    assert!(status.message().contains("maxTokens"), "{status:?}");
    assert_eq!(ch.state(), ConnectivityState::TransientFailure);

    // The record is fixed: the next retry (at most 1.2 × 6.55 s after the 10 s mark) picks it up, and the
    // config it carries applies to the next call, with no restart.
    dns.set_service_config(
        HOST,
        r#"[{"serviceConfig":{"methodConfig":[{"name":[{}],"timeout":"7s"}]}}]"#,
    )
    .await;
    let fixed = Instant::now();
    state_becomes(&ch, ConnectivityState::Ready, Duration::from_secs(10)).await;
    assert!(
        fixed.elapsed() <= Duration::from_secs(9),
        "{:?}",
        fixed.elapsed()
    );
    empty_call(&ch).await.expect("the fixed config is used");
}

#[tokio::test(start_paused = true)]
async fn the_last_good_config_survives_an_address_failure_followed_by_an_invalid_record() {
    // Nothing listens: with the config's waitForReady a call waits out its 3 s timeout; with `{}` it would
    // fail fast. That tells which config is in use.
    let (_held, free) = support::reserved_port();
    let good = r#"[{"serviceConfig":{"methodConfig":[{"name":[{}],"waitForReady":true,"timeout":"3s"}]}}]"#;
    let dns = dns_with(Some(good)).await;
    let ch = channel(&dns, free.port());
    let uses_good_config = |ch: Channel| async move {
        let start = Instant::now();
        let status = ch
            .unary_raw("/a.B/C", Request::new(Bytes::new()))
            .await
            .expect_err("nothing listens");
        (status.code(), start.elapsed() >= Duration::from_secs(3))
    };
    assert_eq!(
        uses_good_config(ch.clone()).await,
        (Code::DeadlineExceeded, true)
    );

    // The name vanishes (no A record, no TXT record). pick_first keeps failing and asks for re-resolution,
    // which comes 30 s after the last one and fails: the channel keeps its endpoints and config.
    dns.remove(HOST, interop::dns::RecordType::A).await;
    dns.remove(
        &format!("_grpc_config.{HOST}"),
        interop::dns::RecordType::TXT,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(35)).await;

    // The name comes back with an invalid config: A21 keeps the last good one, not `{}`.
    dns.add_a(HOST, Ipv4Addr::LOCALHOST).await;
    dns.set_service_config(
        HOST,
        r#"[{"serviceConfig":{"retryThrottling":{"maxTokens":5000,"tokenRatio":1}}}]"#,
    )
    .await;
    // The resolver retries the failed resolutions with backoff (1 s, 1.6 s, ...) and picks it up.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        uses_good_config(ch.clone()).await,
        (Code::DeadlineExceeded, true),
        "the config in use must still be the last good one"
    );
}

/// A retry policy from the TXT record applies to a bidi call: its first attempt fails after the first
/// message, and the retry replays the request.
#[tokio::test(start_paused = true)]
async fn dns_txt_retry_policy_applies_to_a_streaming_call() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            // Bidi echo; the first attempt fails after reading the first message.
            if s.prev() == 0 {
                if s.read_bytes(5 + 2).await.is_ok() {
                    s.trailers_only("14", &[]);
                }
                return;
            }
            let mut body = Vec::new();
            while let Some(Ok(chunk)) = s.recv.data().await {
                let _ = s.recv.flow_control().release_capacity(chunk.len());
                body.extend_from_slice(&chunk);
            }
            if let Some(mut out) = s.headers() {
                for (_, m) in deframe(&body) {
                    let _ = out.send_data(grpc_message(&m), false);
                }
                let _ = out.send_trailers(trailers("0", &[]));
            }
        }),
    )
    .await;
    let dns = interop::dns::TestDns::start().await.expect("dns");
    dns.add_a("svc.test", std::net::Ipv4Addr::LOCALHOST).await;
    let config = retry(3, &["UNAVAILABLE"]).service(SVC).max_backoff("10s");
    dns.set_service_config(
        "svc.test",
        &format!(r#"[{{"clientLanguage":["rust"],"serviceConfig":{config}}}]"#),
    )
    .await;
    let port = server.addr().port();
    let ch = Channel::builder(format!("dns://{}/svc.test:{port}", dns.addr))
        .resolver_options(
            grpc_channel::ResolverOptions::default().with_query_timeout(Duration::from_secs(2)),
        )
        .build()
        .expect("channel");
    let got = guarded("dns bidi", async {
        let (mut tx, mut rx) = ch
            .streaming_raw(
                "/t.S/Bidi",
                Request::new(()).with_timeout(Duration::from_secs(20)),
            )
            .await
            .expect("start");
        for m in [&b"m0"[..], b"m1", b"m2"] {
            tx.send(Bytes::copy_from_slice(m)).await.expect("send");
        }
        tx.finish().await.expect("finish");
        let mut got = Vec::new();
        while let Some(m) = rx.message().await.expect("retried by the TXT policy") {
            got.push(m);
        }
        got
    })
    .await;
    assert_eq!(got, vec![&b"m0"[..], b"m1", b"m2"]);
    let prevs: Vec<Option<HeaderValue>> = server
        .opens()
        .iter()
        .map(|o| o.headers.get("grpc-previous-rpc-attempts").cloned())
        .collect();
    assert_eq!(prevs, vec![None, Some(HeaderValue::from_static("1"))]);
}
