//! The tonic-shaped parts of the API, over real loopback sockets: an eager `connect()` that returns the
//! channel or names why it cannot connect, a per-channel default timeout and how it meets a call's own and
//! the service config's, `MetadataMap::insert` replacing what an earlier interceptor put, `remove`,
//! `Request::set_timeout`, the `Status` shorthands, the TCP options, and the response headers a failure
//! after them keeps (`Status::response_headers`, which tonic's client merges into its status).

use grpc_test_support as support;

use std::error::Error as _;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{
    CallInfo, Channel, Code, ConnectError, ConnectivityState, MetadataMap, Request, Status,
};
use support::guards::NO_HANG;
use support::h2_server::{handler, H2Server, SVC};

const METHOD: &str = "/t.S/M";

/// A server that takes every call and never answers it.
async fn silent_server() -> H2Server {
    H2Server::tcp(
        support::h2_server::defaults,
        handler(|mut stream| async move {
            stream.wait_reset().await;
        }),
    )
    .await
}

/// A server that answers every call with one empty message and OK.
async fn answering_server() -> H2Server {
    H2Server::tcp(
        support::h2_server::defaults,
        handler(|mut stream| async move {
            stream.ok(b"");
        }),
    )
    .await
}

#[tokio::test]
async fn connect_returns_a_ready_channel() {
    let addr = support::interop_server().await;
    let channel = tokio::time::timeout(
        NO_HANG,
        Channel::builder(format!("http://{addr}")).connect(),
    )
    .await
    .expect("no hang")
    .expect("the server is up");
    assert_eq!(channel.state(), ConnectivityState::Ready);
}

#[tokio::test]
async fn connect_to_a_closed_port_names_the_cause() {
    // A port that was just free: nothing listens on it.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let err = tokio::time::timeout(
        NO_HANG,
        Channel::builder(format!("http://127.0.0.1:{port}")).connect(),
    )
    .await
    .expect("a refused connection fails at once, not after a timeout")
    .expect_err("nothing listens");
    let text = format!("{err}");
    eprintln!("a user sees: {text}");
    match &err {
        ConnectError::Unreachable { status, .. } => {
            assert_eq!(status.code(), Code::Unavailable)
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(
        text.to_lowercase().contains("refused"),
        "the error names the cause: {text}"
    );
    assert!(err.source().is_some(), "the status is the source");
}

#[tokio::test]
async fn connect_reports_a_bad_target_as_a_build_error() {
    let err = Channel::builder("unix:")
        .connect()
        .await
        .expect_err("not a target");
    assert!(matches!(err, ConnectError::Build(_)), "{err:?}");
}

/// Runs one call on `channel` and returns its status and how long it took on the paused clock.
async fn timed_call(channel: &Channel, request: Request<Bytes>) -> (Status, Duration) {
    let start = tokio::time::Instant::now();
    let status = channel
        .unary_raw(METHOD, request)
        .await
        .expect_err("the server never answers");
    (status, start.elapsed())
}

#[tokio::test(start_paused = true)]
async fn the_channel_timeout_applies_to_calls_that_set_none() {
    let server = silent_server().await;
    let channel = Channel::builder(server.target())
        .timeout(Duration::from_secs(5))
        .build()
        .expect("channel");
    let (status, took) = timed_call(&channel, Request::new(Bytes::new())).await;
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_eq!(took.as_secs(), 5, "{took:?}");
    let sent = server.opens()[0].headers.get("grpc-timeout").cloned();
    assert!(sent.is_some(), "the deadline goes to the server too");

    // A call's own timeout replaces the channel's, longer or shorter.
    let mut request = Request::new(Bytes::new());
    request.set_timeout(Duration::from_secs(8));
    let (status, took) = timed_call(&channel, request).await;
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert_eq!(took.as_secs(), 8, "{took:?}");
    let (_, took) = timed_call(
        &channel,
        Request::new(Bytes::new()).with_timeout(Duration::from_secs(1)),
    )
    .await;
    assert_eq!(took.as_secs(), 1, "{took:?}");

    // `Duration::MAX`: no deadline at all, for a stream that must outlive the channel's default.
    let endless = channel.unary_raw(
        METHOD,
        Request::new(Bytes::new()).with_timeout(Duration::MAX),
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(3600), endless)
            .await
            .is_err(),
        "still running after an hour"
    );
    let last = server.opens().last().cloned().expect("opened");
    assert!(!last.headers.contains_key("grpc-timeout"));
}

#[tokio::test(start_paused = true)]
async fn the_service_config_timeout_still_caps_the_channel_timeout() {
    let server = silent_server().await;
    let config =
        format!(r#"{{"methodConfig": [{{"name": [{{"service": "{SVC}"}}], "timeout": "2s"}}]}}"#);
    let channel = Channel::builder(server.target())
        .timeout(Duration::from_secs(5))
        .default_service_config(config)
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let (status, took) = timed_call(&channel, Request::new(Bytes::new())).await;
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert_eq!(took.as_secs(), 2, "the smaller deadline wins: {took:?}");
}

#[tokio::test]
async fn insert_replaces_what_an_earlier_interceptor_appended() {
    let server = answering_server().await;
    // The channel's interceptor runs after the client's (here `Request::intercept`, as a generated
    // client with an interceptor does); both set `authorization`.
    let channel = Channel::builder(server.target())
        .interceptor(|call: &mut CallInfo<'_>| -> Result<(), Status> {
            call.metadata_mut()
                .insert("authorization", "Bearer channel")
                .map_err(|e| Status::internal(e.to_string()))
        })
        .build()
        .expect("channel");
    let mut request = Request::new(Bytes::new());
    request.metadata_mut().append("x-drop", "1").expect("md");
    let client = |call: &mut CallInfo<'_>| -> Result<(), Status> {
        let md = call.metadata_mut();
        md.insert("authorization", "Bearer client")
            .map_err(|e| Status::internal(e.to_string()))?;
        assert!(md.remove("x-drop"));
        assert!(!md.remove("x-drop"), "nothing left to remove");
        Ok(())
    };
    request
        .intercept(METHOD, &client)
        .expect("client interceptor");
    tokio::time::timeout(NO_HANG, channel.unary_raw(METHOD, request))
        .await
        .expect("no hang")
        .expect("call");
    let headers = &server.opens()[0].headers;
    let values: Vec<_> = headers.get_all("authorization").iter().collect();
    assert_eq!(values, ["Bearer channel"], "one value, the last one set");
    assert!(!headers.contains_key("x-drop"));
}

#[test]
fn insert_and_remove_keep_the_metadata_rules() {
    let mut md = MetadataMap::new();
    md.append("k", "1").expect("md");
    md.append("k", "2").expect("md");
    md.insert("k", "3").expect("md");
    assert_eq!(md.get_all("k"), ["3"]);
    md.insert_bin("k-bin", b"\x00\x01").expect("md");
    md.insert_bin("k-bin", b"\x02").expect("md");
    assert_eq!(
        md.get_bin_all("k-bin").expect("bin"),
        [Bytes::from_static(b"\x02")]
    );
    // A refused insert leaves the old values.
    assert!(md.insert("k", "bad\nvalue").is_err());
    assert!(md.insert("grpc-status", "0").is_err());
    assert!(md.insert("k-bin", "text").is_err());
    assert_eq!(md.get_all("k"), ["3"]);
    assert!(md.remove("k"));
    assert!(!md.contains_key("k"));
    assert!(!md.remove("Not A Key"));
}

#[test]
fn status_shorthands_carry_their_code() {
    let cases = [
        (Status::ok("m"), Code::Ok),
        (Status::cancelled("m"), Code::Cancelled),
        (Status::unknown("m"), Code::Unknown),
        (Status::invalid_argument("m"), Code::InvalidArgument),
        (Status::deadline_exceeded("m"), Code::DeadlineExceeded),
        (Status::not_found("m"), Code::NotFound),
        (Status::already_exists("m"), Code::AlreadyExists),
        (Status::permission_denied("m"), Code::PermissionDenied),
        (Status::resource_exhausted("m"), Code::ResourceExhausted),
        (Status::failed_precondition("m"), Code::FailedPrecondition),
        (Status::aborted("m"), Code::Aborted),
        (Status::out_of_range("m"), Code::OutOfRange),
        (Status::unimplemented("m"), Code::Unimplemented),
        (Status::internal("m"), Code::Internal),
        (Status::unavailable("m"), Code::Unavailable),
        (Status::data_loss("m"), Code::DataLoss),
        (Status::unauthenticated("m"), Code::Unauthenticated),
    ];
    for (status, code) in cases {
        assert_eq!(status.code(), code);
        assert_eq!(status.message(), "m");
    }
}

/// The kernel's timer state of the client socket connected to `port` (`/proc/net/tcp`'s `tr` column):
/// 2 while a keepalive timer runs.
fn client_socket_timer(port: u16) -> Option<u8> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let remote = format!("0100007F:{port:04X}");
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // sl local_address rem_address st tx_queue:rx_queue tr:tm->when ...
        if fields.get(2) == Some(&remote.as_str()) && fields.get(3) == Some(&"01") {
            fields.get(5)?.split(':').next()?.parse().ok()
        } else {
            None
        }
    })
}

#[tokio::test]
async fn tcp_keepalive_can_be_turned_off_and_nodelay_set() {
    for keepalive in [Some(Duration::from_secs(60)), None] {
        let server = answering_server().await;
        let channel = Channel::builder(server.target())
            .tcp_keepalive(keepalive)
            .tcp_nodelay(false)
            .build()
            .expect("channel");
        tokio::time::timeout(
            NO_HANG,
            channel.unary_raw(METHOD, Request::new(Bytes::new())),
        )
        .await
        .expect("no hang")
        .expect("call");
        let timer = client_socket_timer(server.addr().port());
        assert_eq!(
            timer,
            Some(if keepalive.is_some() { 2 } else { 0 }),
            "keepalive {keepalive:?}: the kernel's keepalive timer runs only when on"
        );
    }
}

/// A server that reads the request, sends response headers with `x-request-id: req-42`, then `messages`
/// empty messages, then fails the call in the trailers (FAILED_PRECONDITION, `x-shard: 7`).
async fn headers_then_failure(messages: usize) -> H2Server {
    use support::h2_server::{response_head, trailers, Stream};
    H2Server::tcp(
        support::h2_server::defaults,
        handler(move |mut s: Stream| async move {
            if s.read_to_end().await.is_err() {
                return;
            }
            let mut head = response_head();
            head.headers_mut()
                .insert("x-request-id", http::HeaderValue::from_static("req-42"));
            let Ok(mut send) = s.respond.send_response(head, false) else {
                return;
            };
            for _ in 0..messages {
                let _ = send.send_data(support::frames::grpc_message(b""), false);
            }
            let _ = send.send_trailers(trailers("9", &[("x-shard", "7")]));
        }),
    )
    .await
}

/// tonic's client puts a failed unary call's response headers in its status; this channel keeps them
/// apart: `Status::metadata` stays the trailers, `Status::response_headers` holds the headers, for a
/// unary call and for a stream that fails after a message alike. A Trailers-Only failure has none.
#[tokio::test]
async fn a_failure_after_response_headers_keeps_them_in_the_status() {
    let server = headers_then_failure(0).await;
    let channel = Channel::new(server.target()).expect("channel");
    let status = tokio::time::timeout(
        NO_HANG,
        channel.unary_raw(METHOD, Request::new(Bytes::new())),
    )
    .await
    .expect("no hang")
    .expect_err("the server fails the call");
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(
        status.response_headers().get("x-request-id"),
        Some("req-42")
    );
    assert_eq!(status.metadata().get("x-shard"), Some("7"));
    assert_eq!(
        status.metadata().get("x-request-id"),
        None,
        "the trailers only"
    );

    let server = headers_then_failure(1).await;
    let channel = Channel::new(server.target()).expect("channel");
    let (sender, mut stream) =
        tokio::time::timeout(NO_HANG, channel.streaming_raw(METHOD, Request::new(())))
            .await
            .expect("no hang")
            .expect("the stream starts");
    tokio::time::timeout(NO_HANG, sender.finish())
        .await
        .expect("no hang")
        .expect("half-closed");
    let first = tokio::time::timeout(NO_HANG, stream.message())
        .await
        .expect("no hang");
    assert!(matches!(first, Ok(Some(_))), "{first:?}");
    let status = tokio::time::timeout(NO_HANG, stream.message())
        .await
        .expect("no hang")
        .expect_err("the server fails the call");
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(
        status.response_headers().get("x-request-id"),
        Some("req-42")
    );
    assert_eq!(status.metadata().get("x-shard"), Some("7"));

    let server = H2Server::tcp(
        support::h2_server::defaults,
        handler(|mut s: support::h2_server::Stream| async move {
            let _ = s.read_to_end().await;
            s.trailers_only("5", &[("x-shard", "7")]);
        }),
    )
    .await;
    let channel = Channel::new(server.target()).expect("channel");
    let status = tokio::time::timeout(
        NO_HANG,
        channel.unary_raw(METHOD, Request::new(Bytes::new())),
    )
    .await
    .expect("no hang")
    .expect_err("NOT_FOUND");
    assert_eq!(status.code(), Code::NotFound);
    assert!(status.response_headers().is_empty(), "{status:?}");
    assert_eq!(status.metadata().get("x-shard"), Some("7"));
}
