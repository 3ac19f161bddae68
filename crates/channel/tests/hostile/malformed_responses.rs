//! A deliberately broken server's answers become the documented statuses, without a panic or a hang.

use grpc_test_support as support;

use bytes::Bytes;
use grpc_channel::{Code, Request, Status};
use interop::faulty::{methods, Event};
use support::guards::NO_HANG;
use support::{channel, faulty_server};

async fn unary_status(path: &str) -> Status {
    let server = faulty_server().await;
    let ch = channel(server.addr);
    let call = ch.unary_raw(path, Request::new(Bytes::new()));
    match tokio::time::timeout(NO_HANG, call).await.expect("no hang") {
        Ok(r) => panic!(
            "{path}: expected an error, got a response of {} bytes",
            r.message().len()
        ),
        Err(s) => s,
    }
}

async fn check(path: &str, code: Code, message_part: &str) {
    let status = unary_status(path).await;
    assert_eq!(status.code(), code, "{path}: {status:?}");
    assert!(
        status.message().contains(message_part),
        "{path}: message {:?} lacks {message_part:?}",
        status.message()
    );
}

#[tokio::test]
async fn wrong_content_type_is_unknown() {
    check(methods::WRONG_CONTENT_TYPE, Code::Unknown, "text/html").await;
}

#[tokio::test]
async fn http_503_without_grpc_status_is_unavailable() {
    check(methods::HTTP_503, Code::Unavailable, "503").await;
}

#[tokio::test]
async fn http_404_without_grpc_status_is_unimplemented() {
    check(methods::HTTP_404, Code::Unimplemented, "404").await;
}

#[tokio::test]
async fn truncated_frame_is_internal() {
    check(
        methods::TRUNCATED_FRAME,
        Code::Internal,
        "middle of a message",
    )
    .await;
}

#[tokio::test]
async fn oversize_message_is_resource_exhausted_and_the_stream_is_cancelled() {
    let server = faulty_server().await;
    let ch = channel(server.addr);
    let call = ch.unary_raw(methods::OVERSIZE, Request::new(Bytes::new()));
    let status = tokio::time::timeout(NO_HANG, call)
        .await
        .expect("no hang")
        .expect_err("oversize");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("5242880"), "{status:?}");
    // The server keeps the stream open; the client must have reset it.
    let want = Event::Reset {
        path: methods::OVERSIZE.to_owned(),
        reason: h2::Reason::CANCEL,
    };
    for _ in 0..200 {
        if server.events().contains(&want) {
            return;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("server never saw RST_STREAM(CANCEL): {:?}", server.events());
}

#[tokio::test]
async fn call_option_lowers_the_receive_limit() {
    let addr = support::interop_server().await;
    let ch = channel(addr);
    let req = interop_proto::SimpleRequest {
        response_size: 2000,
        ..Default::default()
    };
    let status = ch
        .unary::<_, interop_proto::SimpleResponse>(
            interop_proto::paths::UNARY_CALL,
            Request::new(req).with_max_receive_message_size(1000),
        )
        .await
        .expect_err("over the call's limit");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
}

#[tokio::test]
async fn non_numeric_grpc_status_is_unknown() {
    check(
        methods::NON_NUMERIC_STATUS,
        Code::Unknown,
        "invalid grpc-status \"abc\"",
    )
    .await;
}

#[tokio::test]
async fn missing_grpc_status_in_trailers_is_unknown() {
    check(
        methods::MISSING_STATUS,
        Code::Unknown,
        "missing grpc-status",
    )
    .await;
}

#[tokio::test]
async fn missing_trailers_is_internal() {
    check(
        methods::NO_TRAILERS,
        Code::Internal,
        "without sending trailers",
    )
    .await;
}

#[tokio::test]
async fn refused_stream_is_unavailable() {
    check(methods::RST_REFUSED, Code::Unavailable, "REFUSED_STREAM").await;
}

#[tokio::test]
async fn enhance_your_calm_is_resource_exhausted() {
    check(
        methods::RST_CALM,
        Code::ResourceExhausted,
        "ENHANCE_YOUR_CALM",
    )
    .await;
}

#[tokio::test]
async fn server_cancel_is_cancelled() {
    check(methods::RST_CANCEL, Code::Cancelled, "CANCEL").await;
}

#[tokio::test]
async fn invalid_compressed_flag_is_internal() {
    check(methods::BAD_FLAG, Code::Internal, "compressed flag 2").await;
}

#[tokio::test]
async fn compressed_message_without_grpc_encoding_is_internal() {
    check(
        methods::COMPRESSED_WITHOUT_ENCODING,
        Code::Internal,
        "no grpc-encoding",
    )
    .await;
}

/// `doc/compression.md`: a client that gets a message in an encoding it does not support fails the call
/// with INTERNAL (it never advertised it).
#[tokio::test]
async fn compressed_message_with_unknown_encoding_is_internal() {
    check(
        methods::UNKNOWN_ENCODING,
        Code::Internal,
        "\"snappy\", an encoding this client does not support",
    )
    .await;
}

#[tokio::test]
async fn garbage_gzip_is_internal() {
    check(methods::GARBAGE_GZIP, Code::Internal, "decompress").await;
}

#[tokio::test]
async fn two_messages_on_a_unary_call_is_unimplemented() {
    check(methods::TWO_MESSAGES, Code::Unimplemented, "cardinality").await;
}

#[tokio::test]
async fn no_message_on_a_unary_call_is_unimplemented() {
    check(methods::NO_MESSAGE, Code::Unimplemented, "cardinality").await;
}

#[tokio::test]
async fn dropped_connection_is_unavailable_and_the_channel_reconnects() {
    let server = faulty_server().await;
    let ch = channel(server.addr);
    let call = ch.unary_raw(methods::DROP_CONNECTION, Request::new(Bytes::new()));
    let status = tokio::time::timeout(NO_HANG, call)
        .await
        .expect("no hang")
        .expect_err("dropped");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let ok = tokio::time::timeout(
        NO_HANG,
        ch.unary_raw(methods::ECHO_HEADERS, Request::new(Bytes::new())),
    )
    .await
    .expect("no hang");
    assert!(ok.is_ok(), "the next call reconnects: {ok:?}");
    assert_eq!(server.connections(), 2);
}

#[tokio::test]
async fn goaway_during_a_call_is_unavailable() {
    check(methods::GOAWAY, Code::Unavailable, "").await;
}

#[tokio::test]
async fn rich_trailers_only_status_keeps_message_details_and_metadata() {
    let status = unary_status(methods::RICH_STATUS).await;
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(status.message(), "café %ZZ 100%");
    assert_eq!(status.details_bin().map(|d| d.to_vec()), Some(vec![8, 9]));
    assert_eq!(status.metadata().get("x-extra"), Some("kept"));
}

#[tokio::test]
async fn rich_error_details_decode_with_their_standard_types() {
    let status = unary_status(methods::RICH_DETAILS).await;
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(status.message(), "slow down");
    let details = status
        .details()
        .expect("the details decode")
        .expect("the server sent details");
    let delay = details
        .retry_info
        .and_then(|r| r.retry_delay)
        .and_then(|d| d.to_duration());
    assert_eq!(delay, Some(std::time::Duration::from_millis(1500)));
    let info = details.error_info.expect("ErrorInfo");
    assert_eq!(
        (info.reason.as_str(), info.domain.as_str()),
        ("RATE_LIMITED", "fault.test")
    );
    assert_eq!(
        info.metadata.get("client").map(String::as_str),
        Some("test")
    );
    let bad = details.bad_request.expect("BadRequest");
    assert_eq!(bad.field_violations.len(), 1);
    assert_eq!(bad.field_violations[0].field, "name");
    assert!(details.other.is_empty());
}

#[tokio::test]
async fn connection_refused_is_unavailable_with_its_source() {
    // A reserved port: nothing listens there.
    let (_held, addr) = support::reserved_port();
    let ch = channel(addr);
    let status = ch
        .unary_raw("/a.B/C", Request::new(Bytes::new()))
        .await
        .expect_err("nothing listens");
    assert_eq!(status.code(), Code::Unavailable);
    assert!(status.message().contains("failed to connect"), "{status:?}");
    let mut source = std::error::Error::source(&status);
    let mut found_io = false;
    while let Some(s) = source {
        found_io |= s.downcast_ref::<std::io::Error>().is_some();
        source = s.source();
    }
    assert!(
        found_io,
        "the io::Error stays reachable through source(): {status:?}"
    );
}
