//! `grpc_channel::tower::ChannelService` at its edges: tonic-generated clients and hand-built `http::Request`s
//! through the adapter, over real loopback sockets: oversize messages, a request stream released when the
//! call ends, connection-specific headers, compressed, failing and truncated request bodies; and, against
//! grpc-channel's scriptable h2 server on tokio's paused clock, a body the adapter's pump streams behind
//! flow control after the response headers committed the call, then ends, fails, or ends after the server
//! already answered.

use grpc_test_support as support;

use std::collections::VecDeque;
use std::io::Write as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::tower::{ChannelService, ResponseBody};
use grpc_channel::Channel;
use grpc_feature_tests::testing::test_service_client::TestServiceClient;
use grpc_feature_tests::testing::{
    Payload, ResponseParameters, SimpleRequest, SimpleResponse, StreamingInputCallRequest,
    StreamingOutputCallRequest,
};
use h2::Reason;
use http_body::{Body, Frame};
use prost::Message as _;
use support::frames::frame;
use support::frames::{grpc_message, numbered, payloads};
use support::guards::NO_HANG;
use support::guards::{guarded, settle};
use support::h2_server::{
    answers_without_reading, handler, reads_then_answers, small_window, Event, H2Server, HeadersAt,
    Stream,
};
use support::interop_server;
use tower_service::Service as _;

fn payload(n: usize) -> Option<Payload> {
    Some(Payload {
        r#type: 0,
        body: vec![7; n],
    })
}

/// A request body made of the given frames; `Err` items are body errors.
struct TestBody(VecDeque<Result<Bytes, String>>);

#[derive(Debug)]
struct BodyError(String);
impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for BodyError {}

impl Body for TestBody {
    type Data = Bytes;
    type Error = BodyError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        Poll::Ready(
            self.0
                .pop_front()
                .map(|r| r.map(Frame::data).map_err(BodyError)),
        )
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("gzip");
    e.finish().expect("gzip")
}

fn grpc_request(path: &str, body: TestBody) -> http::Request<TestBody> {
    http::Request::builder()
        .method("POST")
        .uri(format!("http://example.invalid{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .expect("request")
}

/// Reads a whole response body: (data, trailers).
async fn read_body(
    response: http::Response<grpc_channel::tower::ResponseBody>,
) -> (http::HeaderMap, Vec<u8>, Option<http::HeaderMap>) {
    let (parts, body) = response.into_parts();
    let mut body = std::pin::pin!(body);
    let mut data = Vec::new();
    let mut trailers = None;
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame.expect("frame");
        match frame.into_data() {
            Ok(d) => data.extend_from_slice(&d),
            Err(frame) => {
                if let Ok(t) = frame.into_trailers() {
                    trailers = Some(t);
                }
            }
        }
    }
    (parts.headers, data, trailers)
}

fn status_of(headers: &http::HeaderMap, trailers: &Option<http::HeaderMap>) -> Option<String> {
    headers
        .get("grpc-status")
        .or_else(|| trailers.as_ref().and_then(|t| t.get("grpc-status")))
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

// ---- Through tonic-generated clients --------------------------------------------------------------------

/// A request message over the channel's send limit fails the call with RESOURCE_EXHAUSTED, as
/// `Channel::client_streaming` and `Channel::bidi_streaming` do (`RequestSender::abort`). The failure this
/// guards against: the adapter's pump dropped the message and half-closed, so the server saw a truncated
/// request stream and the call succeeded with the wrong data.
#[tokio::test]
async fn tower_oversize_request_message_fails_the_call() {
    let addr = interop_server().await;
    let channel = Channel::builder(format!("ipv4:{addr}"))
        .max_send_message_size(1000)
        .build()
        .expect("channel");
    let mut client = TestServiceClient::new(ChannelService::new(channel));
    let requests: Vec<StreamingInputCallRequest> = [10, 5000, 20]
        .iter()
        .map(|&n| StreamingInputCallRequest {
            payload: payload(n),
            ..Default::default()
        })
        .collect();
    let result = tokio::time::timeout(
        NO_HANG,
        client.streaming_input_call(tokio_stream::iter(requests)),
    )
    .await
    .expect("no hang");
    match result {
        Err(status) => assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}"),
        Ok(response) => panic!(
            "the 5000-byte message (over the 1000-byte send limit) was dropped and the call succeeded \
             with aggregated_payload_size = {} (the server got a truncated stream)",
            response.into_inner().aggregated_payload_size
        ),
    }
}

/// When the call ends (here: the tonic client drops its response stream), the adapter drops the request
/// body and with it the application's request stream, as `Channel::bidi_streaming`'s pump does (and hyper,
/// when the stream is reset): the application's `mpsc::Sender` sees `closed()`. The failure this guards
/// against: the pump kept the body alive, parked in `poll_frame`, for as long as the stream yielded nothing,
/// and its task leaked.
#[tokio::test]
async fn tower_request_stream_is_released_when_the_call_ends() {
    let addr = interop_server().await;
    let channel = Channel::new(format!("ipv4:{addr}")).expect("channel");
    let mut client = TestServiceClient::new(ChannelService::new(channel));
    let (tx, rx) = tokio::sync::mpsc::channel::<StreamingOutputCallRequest>(4);
    tx.send(StreamingOutputCallRequest {
        response_parameters: vec![ResponseParameters {
            size: 10,
            ..Default::default()
        }],
        ..Default::default()
    })
    .await
    .expect("send");
    let mut stream = tokio::time::timeout(
        NO_HANG,
        client.full_duplex_call(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
    .await
    .expect("no hang")
    .expect("bidi")
    .into_inner();
    let first = tokio::time::timeout(NO_HANG, stream.message())
        .await
        .expect("no hang")
        .expect("message");
    assert!(first.is_some());
    drop(stream); // the application gives up on the call
                  // Paused clock from here: the 5 s pass as soon as every task is idle.
    tokio::time::pause();
    let released = tokio::time::timeout(Duration::from_secs(5), tx.closed()).await;
    assert!(
        released.is_ok(),
        "5 s (paused clock) after the call was cancelled, the adapter still holds the request stream (the pump task \
         waits in the body's poll_frame and never drops it)"
    );
}

/// HTTP/1 connection-specific request headers (`connection`, `keep-alive`, `transfer-encoding`, `upgrade`,
/// `proxy-connection`), which h2 refuses to send, are dropped, as hyper (tonic's own transport) drops them:
/// such a header added by a tower layer or tonic metadata does not break the call. The failure this guards
/// against: every request header that was not the protocol's own became metadata, `MetadataMap::append`
/// rejected these as reserved, and the call failed locally with INTERNAL.
#[tokio::test]
async fn tower_connection_header_in_tonic_metadata_is_dropped() {
    let addr = interop_server().await;
    let channel = Channel::new(format!("ipv4:{addr}")).expect("channel");
    let mut client = TestServiceClient::new(ChannelService::new(channel));
    let mut request = tonic::Request::new(SimpleRequest {
        response_size: 10,
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("connection", "keep-alive".parse().expect("value"));
    let result = tokio::time::timeout(NO_HANG, client.unary_call(request))
        .await
        .expect("no hang");
    if let Err(status) = &result {
        panic!("a `connection` request header failed the call: {status:?}");
    }
}

// ---- Hand-built request bodies ---------------------------------------------------------------------------

/// A gzip-compressed request message (grpc-encoding: gzip) is decompressed and sent on.
#[tokio::test]
async fn tower_compressed_request_body_is_decompressed() {
    let addr = interop_server().await;
    let channel = Channel::new(format!("ipv4:{addr}")).expect("channel");
    let mut service = ChannelService::new(channel);
    let req = SimpleRequest {
        response_size: 33,
        payload: payload(4000),
        ..Default::default()
    };
    let body = TestBody(
        [Ok(frame(true, &gzip(&req.encode_to_vec())))]
            .into_iter()
            .collect(),
    );
    let mut request = grpc_request("/grpc.testing.TestService/UnaryCall", body);
    request
        .headers_mut()
        .insert("grpc-encoding", http::HeaderValue::from_static("gzip"));
    let response = tokio::time::timeout(NO_HANG, service.call(request))
        .await
        .expect("no hang")
        .expect("response");
    let (headers, data, trailers) = read_body(response).await;
    assert_eq!(
        status_of(&headers, &trailers).as_deref(),
        Some("0"),
        "{headers:?} {trailers:?}"
    );
    let resp = SimpleResponse::decode(&data[5..]).expect("decode");
    assert_eq!(resp.payload.map(|p| p.body.len()), Some(33));
}

/// A request body that fails ends the call CANCELLED (Trailers-Only or trailers), without hanging.
#[tokio::test]
async fn tower_request_body_error_cancels() {
    let addr = interop_server().await;
    let channel = Channel::new(format!("ipv4:{addr}")).expect("channel");
    let mut service = ChannelService::new(channel);
    let req = StreamingInputCallRequest {
        payload: payload(10),
        ..Default::default()
    };
    let body = TestBody(
        [
            Ok(frame(false, &req.encode_to_vec())),
            Err("disk on fire".to_owned()),
        ]
        .into_iter()
        .collect(),
    );
    let request = grpc_request("/grpc.testing.TestService/StreamingInputCall", body);
    let response = tokio::time::timeout(NO_HANG, service.call(request))
        .await
        .expect("no hang")
        .expect("response");
    let (headers, _, trailers) = tokio::time::timeout(NO_HANG, read_body(response))
        .await
        .expect("no hang");
    assert_eq!(
        status_of(&headers, &trailers).as_deref(),
        Some("1"),
        "{headers:?} {trailers:?}"
    );
}

/// A body cut inside a message ends the call INTERNAL.
#[tokio::test]
async fn tower_truncated_request_body_is_internal() {
    let addr = interop_server().await;
    let channel = Channel::new(format!("ipv4:{addr}")).expect("channel");
    let mut service = ChannelService::new(channel);
    let full = frame(false, &[1, 2, 3, 4, 5, 6]);
    let body = TestBody([Ok(full.slice(..7))].into_iter().collect());
    let request = grpc_request("/grpc.testing.TestService/UnaryCall", body);
    let response = tokio::time::timeout(NO_HANG, service.call(request))
        .await
        .expect("no hang")
        .expect("response");
    let (headers, _, trailers) = tokio::time::timeout(NO_HANG, read_body(response))
        .await
        .expect("no hang");
    assert_eq!(
        status_of(&headers, &trailers).as_deref(),
        Some("13"),
        "{headers:?} {trailers:?}"
    );
}

// ---- A body streamed behind flow control after commit (grpc-channel's scriptable h2 server) -------------

/// A request body the test feeds: DATA chunks, or an error.
struct FedBody(tokio::sync::mpsc::UnboundedReceiver<Result<Bytes, std::io::Error>>);

impl Body for FedBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|item| item.map(|r| r.map(Frame::data)))
    }
}

type Feed = tokio::sync::mpsc::UnboundedSender<Result<Bytes, std::io::Error>>;

/// Starts a call through the adapter on `server`, with a body the test feeds; the response once its head
/// is in (the call has committed: every server here answers response headers at once), and the service
/// (its channel must outlive the call).
async fn start(server: &H2Server) -> (ChannelService, Feed, http::Response<ResponseBody>) {
    let channel = Channel::new(server.target()).expect("channel");
    let mut service = ChannelService::new(channel);
    let (feed, fed) = tokio::sync::mpsc::unbounded_channel();
    let request = http::Request::builder()
        .method("POST")
        .uri("http://example.invalid/t.S/Bidi")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(FedBody(fed))
        .expect("request");
    let response = guarded("call", service.call(request))
        .await
        .expect("infallible");
    (service, feed, response)
}

/// The response body to its end: the payloads of its messages, and `grpc-status`.
async fn read_response(response: http::Response<ResponseBody>) -> (Vec<Vec<u8>>, Option<String>) {
    let (headers, data, trailers) = guarded("response", read_body(response)).await;
    (payloads(&data), status_of(&headers, &trailers))
}

/// How stream 1 ended at the server: END_STREAMs and reset reasons.
fn ends(server: &H2Server) -> (usize, Vec<Reason>) {
    let events = server.events();
    let ends = events
        .iter()
        .filter(|e| matches!(e, Event::End { id: 1, .. }))
        .count();
    let resets = events
        .iter()
        .filter_map(|e| match e {
            Event::Reset(r) if r.id == 1 => Some(r.reason),
            _ => None,
        })
        .collect();
    (ends, resets)
}

/// Committed at once, the body streams 150 messages behind a 1000-byte window the server reads only after
/// 2 s, then ends: the server gets them all, whole and in order, then one END_STREAM, and answers OK.
#[tokio::test(start_paused = true)]
async fn a_body_streamed_after_commit_ends_once_after_its_backlog() {
    let server = H2Server::tcp(
        small_window,
        reads_then_answers(HeadersAt::Start, Duration::from_secs(2)),
    )
    .await;
    let (_service, feed, response) = start(&server).await;
    let messages: Vec<Vec<u8>> = (0..150).map(|i| numbered(i, 1000)).collect();
    for m in &messages {
        feed.send(Ok(grpc_message(m))).expect("feed");
    }
    drop(feed);
    let (data, status) = read_response(response).await;
    assert_eq!(status.as_deref(), Some("0"));
    assert_eq!(data, vec![b"done".to_vec()]);
    let (body, ends) = server.body_of_id(1);
    assert_eq!(payloads(&body), messages);
    assert_eq!(ends, 1);
}

/// Committed at once, the body streams 100 messages (most held behind the window) and then fails: the
/// stream is reset with CANCEL and never half-closed, and the response says CANCELLED.
#[tokio::test(start_paused = true)]
async fn a_body_failing_after_commit_with_a_backlog_resets_and_never_half_closes() {
    let server = H2Server::tcp(
        small_window,
        handler(|mut s: Stream| async move {
            let Some(_send) = s.headers() else { return };
            tokio::time::sleep(Duration::from_secs(2)).await;
            let _ = s.read_to_end().await;
        }),
    )
    .await;
    let (_service, feed, response) = start(&server).await;
    for i in 0..60 {
        feed.send(Ok(grpc_message(&numbered(i, 1000))))
            .expect("feed");
    }
    settle(Duration::from_millis(100)).await;
    feed.send(Err(std::io::Error::other("broken body")))
        .expect("feed");
    let (_, status) = read_response(response).await;
    assert_eq!(status.as_deref(), Some("1"), "CANCELLED");
    settle(Duration::from_secs(3)).await;
    assert_eq!(ends(&server), (0, vec![Reason::CANCEL]));
}

// Failed before the fix (a regression of the pumps' cancel_on_drop): "the server answered OK; the adapter's
// response says grpc-status Some(\"1\")" (CANCELLED): as with the bidi pump, `finish` failed and the
// sender's `cancel_on_drop` drop made CANCELLED the call's status.
/// The server answers the whole response (a message, then OK) without reading the request while the
/// body's messages wait behind flow control; h2 then resets the request stream with NO_ERROR. The body
/// ends afterwards, and only then is the response read: it is the server's message and OK, not a
/// CANCELLED made up by the pump's drop.
#[tokio::test(start_paused = true)]
async fn a_body_ending_after_an_early_ok_response_does_not_cancel_it() {
    let server = H2Server::tcp(
        small_window,
        answers_without_reading(Duration::from_millis(500), b"early"),
    )
    .await;
    let (_service, feed, response) = start(&server).await;
    for i in 0..40 {
        feed.send(Ok(grpc_message(&numbered(i, 1000))))
            .expect("feed");
    }
    settle(Duration::from_secs(1)).await;
    drop(feed);
    settle(Duration::from_millis(100)).await;
    let (data, status) = read_response(response).await;
    assert_eq!(data, vec![b"early".to_vec()]);
    assert_eq!(
        status.as_deref(),
        Some("0"),
        "the server answered OK; the adapter's response says grpc-status {status:?}"
    );
}
