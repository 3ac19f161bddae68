//! Calls against the interop server over real sockets: every interop case, request headers on the wire,
//! metadata, compression, limits, concurrency, and what `Channel::stats()` keeps of a call dropped mid-stream.

use grpc_test_support as support;

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Encoding, Request};
use interop::client::{self, SoakConfig, ALL_CASES};
use interop::faulty::methods;
use interop_proto::{
    paths, Empty, ResponseParameters, SimpleRequest, SimpleResponse, StreamingInputCallRequest,
    StreamingInputCallResponse, StreamingOutputCallRequest, StreamingOutputCallResponse,
};
use support::guards::NO_HANG;
use support::{channel, faulty_server, interop_server, IterStream};

#[tokio::test]
async fn every_interop_case_passes_against_the_interop_server() {
    let addr = interop_server().await;
    let ctx = client::Context {
        channel: channel(addr),
        target: format!("ipv4:{addr}"),
        channel_builder: grpc_channel::Channel::builder(format!("ipv4:{addr}")),
        metadata: vec![("x-extra".into(), "on every call".into())],
        soak: SoakConfig {
            iterations: 5,
            ..SoakConfig::default()
        },
    };
    for case in ALL_CASES {
        let r = tokio::time::timeout(NO_HANG, client::run_case(&ctx, case))
            .await
            .expect("no hang");
        assert_eq!(r, Ok(()), "{case}");
    }
}

#[tokio::test]
async fn request_headers_on_the_wire() {
    let server = faulty_server().await;
    let ch = Channel::builder(format!("ipv4:{}", server.addr))
        .authority("svc.example:8443")
        .user_agent("my-app/1.0")
        .build()
        .expect("channel");
    let mut req = Request::new(Bytes::from_static(b"x")).with_timeout(Duration::from_secs(5));
    req.metadata_mut()
        .append("x-ascii", "plain value")
        .expect("ascii");
    req.metadata_mut()
        .append_bin("x-raw-bin", &[0xab])
        .expect("bin");
    let resp = ch
        .unary_raw(methods::ECHO_HEADERS, req)
        .await
        .expect("call");
    let seen = resp.trailers();
    assert_eq!(seen.get("x-seen-te"), Some("trailers"));
    assert_eq!(seen.get("x-seen-content-type"), Some("application/grpc"));
    assert_eq!(seen.get("x-seen-authority"), Some("svc.example:8443"));
    assert_eq!(seen.get("x-seen-grpc-accept-encoding"), Some("gzip"));
    assert_eq!(seen.get("x-seen-x-ascii"), Some("plain value"));
    assert_eq!(
        seen.get("x-seen-grpc-encoding"),
        None,
        "no compression asked"
    );
    let agent = seen.get("x-seen-user-agent").expect("user-agent");
    assert!(agent.starts_with("my-app/1.0 grpc-rust/"), "{agent}");
    // Binary metadata goes unpadded: 0xab is "qw", not "qw==".
    let raw = seen
        .iter()
        .find(|(k, _)| *k == "x-seen-x-raw-bin-bin")
        .map(|(_, v)| v.to_vec());
    let raw = raw.or_else(|| {
        seen.iter()
            .find(|(k, _)| *k == "x-seen-x-raw-bin")
            .map(|(_, v)| v.to_vec())
    });
    assert_eq!(raw.as_deref(), Some(&b"qw"[..]));
    // grpc-timeout: at most 8 digits, a unit, and no more than the 5 s asked for.
    let timeout = seen.get("x-seen-grpc-timeout").expect("grpc-timeout");
    let d = grpc_channel::timeout::decode(timeout.as_bytes()).expect("valid grpc-timeout");
    assert!(
        d <= Duration::from_secs(5) && d > Duration::from_secs(4),
        "{timeout}"
    );
}

#[tokio::test]
async fn compressed_request_sends_grpc_encoding() {
    let server = faulty_server().await;
    let ch = channel(server.addr);
    let req = Request::new(Bytes::from(vec![1u8; 1000])).with_compression(Encoding::Gzip);
    let resp = ch
        .unary_raw(methods::ECHO_HEADERS, req)
        .await
        .expect("call");
    assert_eq!(resp.trailers().get("x-seen-grpc-encoding"), Some("gzip"));
}

#[tokio::test]
async fn oversize_request_is_not_sent() {
    let addr = interop_server().await;
    let ch = Channel::builder(format!("ipv4:{addr}"))
        .max_send_message_size(1000)
        .build()
        .expect("channel");
    let req = SimpleRequest {
        payload: Some(interop_proto::Payload {
            r#type: 0,
            body: Bytes::from(vec![0; 2000]),
        }),
        ..Default::default()
    };
    let status = ch
        .unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(req))
        .await
        .expect_err("over the send limit");
    assert_eq!(status.code(), Code::ResourceExhausted);
    // The message names the limit hit and where it was set.
    assert!(
        status.message().contains(
            "vs. 1000 bytes: the channel's max_send_message_size, set with ChannelBuilder"
        ),
        "{status:?}"
    );
    // The channel still works.
    ch.unary::<_, Empty>(paths::EMPTY_CALL, Request::new(Empty {}))
        .await
        .expect("next call");
}

#[tokio::test]
async fn client_streaming_from_a_stream() {
    let addr = interop_server().await;
    let ch = channel(addr);
    let messages = [3usize, 0, 70_000]
        .into_iter()
        .map(|n| StreamingInputCallRequest {
            payload: Some(interop_proto::Payload {
                r#type: 0,
                body: Bytes::from(vec![0; n]),
            }),
            expect_compressed: None,
        });
    let resp = ch
        .client_streaming::<_, StreamingInputCallResponse, _>(
            paths::STREAMING_INPUT_CALL,
            Request::new(IterStream(messages)),
        )
        .await
        .expect("call");
    assert_eq!(resp.message().aggregated_payload_size, 70_003);
}

#[tokio::test]
async fn server_streaming_as_a_stream() {
    let addr = interop_server().await;
    let ch = channel(addr);
    let req = interop_proto::StreamingOutputCallRequest {
        response_parameters: (1..=50)
            .map(|i| interop_proto::ResponseParameters {
                size: i * 100,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let resp = ch
        .server_streaming::<_, interop_proto::StreamingOutputCallResponse>(
            paths::STREAMING_OUTPUT_CALL,
            Request::new(req),
        )
        .await
        .expect("call");
    let mut stream = resp.into_message();
    let mut sizes = Vec::new();
    while let Some(item) =
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(&mut stream), cx)).await
    {
        sizes.push(item.expect("message").payload.map_or(0, |p| p.body.len()));
    }
    assert_eq!(sizes, (1..=50).map(|i| i * 100).collect::<Vec<_>>());
    assert_eq!(stream.trailers().map(|t| t.is_empty()), Some(true));
}

#[tokio::test]
async fn thousands_of_concurrent_small_calls_share_one_connection() {
    // With h2's default DATA-frame budget a few hundred unread small responses make h2 close the connection
    // (`too_many_data_frames`); the channel's settings must absorb this.
    let addr = interop_server().await;
    let ch = channel(addr);
    let mut tasks = Vec::new();
    for _ in 0..2000 {
        let ch = ch.clone();
        tasks.push(tokio::spawn(async move {
            ch.unary::<_, Empty>(paths::EMPTY_CALL, Request::new(Empty {}))
                .await
        }));
    }
    let mut failures = Vec::new();
    for t in tasks {
        if let Err(s) = t.await.expect("task") {
            failures.push(s);
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures, first: {:?}",
        failures.len(),
        failures.first()
    );
}

#[tokio::test]
async fn message_and_message_stream_over_the_default_window() {
    // A 3 MiB response (over the 1 MiB stream window) and a 3 MiB request.
    let addr = interop_server().await;
    let ch = channel(addr);
    let req = SimpleRequest {
        response_size: 3 << 20,
        payload: Some(interop_proto::Payload {
            r#type: 0,
            body: Bytes::from(vec![0; 3 << 20]),
        }),
        ..Default::default()
    };
    let resp = ch
        .unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(req))
        .await
        .expect("call");
    assert_eq!(
        resp.message().payload.as_ref().map(|p| p.body.len()),
        Some(3 << 20)
    );
}

#[test]
fn invalid_targets_and_options_fail_at_build_time() {
    assert!(Channel::new("host:").is_err());
    assert!(Channel::new("unix:").is_err());
    assert!(Channel::new("unix:/tmp/x").is_ok());
    assert!(Channel::new("dns://127.0.0.1:5353/svc.test:1").is_ok());
    let bad_config = Channel::builder("localhost:1")
        .default_service_config(r#"{"methodConfig":[{"name":[{}],"timeout":"soon"}]}"#)
        .build()
        .expect_err("invalid default config");
    assert!(
        bad_config.to_string().contains("$.methodConfig[0].timeout"),
        "{bad_config}"
    );
    assert!(Channel::builder("localhost:1")
        .authority("bad authority")
        .build()
        .is_err());
    let mut bad_window = grpc_channel::Http2Settings::default();
    bad_window.stream_window = 10;
    assert!(Channel::builder("localhost:1")
        .http2_settings(bad_window)
        .build()
        .is_err());
    assert!(Channel::new("localhost:50051").is_ok());
    assert!(Channel::new("dns:///localhost:50051").is_ok());
}

#[tokio::test]
async fn invalid_method_path_is_a_clear_error() {
    let ch = Channel::new("127.0.0.1:1").expect("channel");
    let status = ch
        .unary_raw("no-slash", Request::new(Bytes::new()))
        .await
        .expect_err("bad path");
    assert_eq!(status.code(), Code::Internal);
    assert!(
        status.message().contains("invalid method path"),
        "{status:?}"
    );
}

#[tokio::test]
async fn a_unix_socket_target() {
    let dir = std::env::temp_dir().join(format!("grpc-channel-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("interop.sock");
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).expect("bind unix socket");
    tokio::spawn(interop::server::serve_unix(listener));
    let ch = Channel::new(format!("unix:{}", path.display())).expect("channel");
    let req = SimpleRequest {
        response_size: 10,
        ..Default::default()
    };
    let r = ch
        .unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(req))
        .await
        .expect("call over a unix socket");
    assert_eq!(r.message().payload.as_ref().map(|p| p.body.len()), Some(10));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir(&dir);
}

/// A server stream of two messages, the second a minute after the first.
fn slow_stream_request() -> StreamingOutputCallRequest {
    StreamingOutputCallRequest {
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
    }
}

/// A call the application drops after it committed (here a server stream dropped after its first message)
/// keeps its attempt in `Channel::stats().methods`, as in the channel totals. The failure this guards against:
/// dropping a committed call only reset the stream, nothing handed the state machine's counts to the
/// telemetry, and the method was recorded with the default `CallStats` (0 attempts, 0 retries).
#[tokio::test]
async fn stats_keep_the_attempts_of_a_call_dropped_after_commit() {
    let addr = interop_server().await;
    let ch = channel(addr);
    let response = tokio::time::timeout(
        NO_HANG,
        ch.server_streaming::<_, StreamingOutputCallResponse>(
            paths::STREAMING_OUTPUT_CALL,
            Request::new(slow_stream_request()),
        ),
    )
    .await
    .expect("no hang")
    .expect("call");
    let mut stream = response.into_message();
    let first = tokio::time::timeout(NO_HANG, stream.message())
        .await
        .expect("no hang")
        .expect("first message");
    assert!(first.is_some());
    drop(stream); // the application cancels the call mid-stream
    let stats = ch.stats();
    assert_eq!(
        (
            stats.calls_started,
            stats.calls_failed,
            stats.attempts_started
        ),
        (1, 1, 1),
        "{stats:?}"
    );
    let method = stats
        .methods
        .get(paths::STREAMING_OUTPUT_CALL)
        .unwrap_or_else(|| panic!("method recorded: {stats:?}"));
    assert_eq!(
        (method.calls, method.attempts),
        (1, 1),
        "the cancelled call's attempt is lost from the per-method stats: {method:?}"
    );
}
