//! Compression and message size limits against tonic: grpc-build's generated client (grpc-channel) calling
//! a tonic server with each of gzip, deflate and zstd both ways, and tonic-generated clients calling through
//! `ChannelService`, where the tonic client's own `max_decoding_message_size` governs unless the channel has
//! a limit of its own, and compressed replies reach tonic still compressed or decompressed accordingly.

use grpc_test_support as support;

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use grpc_channel::tower::ChannelService;
use grpc_channel::{Channel, Encoding};
use grpc_feature_tests::testing::test_service_client::TestServiceClient as TonicClient;
use http_body::{Body, Frame};
use interop_proto::test_service_client::TestServiceClient;
use prost::Message as _;
use support::frames::frame;
use support::guards::NO_HANG;
use support::interop_server;
use tonic::codec::CompressionEncoding;
use tonic_peer::tonic_server;
use tower_service::Service as _;

const ENCODINGS: [(Encoding, CompressionEncoding, &str); 3] = [
    (Encoding::Gzip, CompressionEncoding::Gzip, "gzip"),
    (Encoding::Deflate, CompressionEncoding::Deflate, "deflate"),
    (Encoding::Zstd, CompressionEncoding::Zstd, "zstd"),
];

const EIGHT_MIB: i32 = 8 << 20;

fn target(addr: std::net::SocketAddr) -> String {
    format!("ipv4:{addr}")
}

/// Our `SimpleRequest` with `payload` bytes of `q`, asking for `response_size` bytes.
fn simple(payload: usize, response_size: i32) -> interop_proto::SimpleRequest {
    interop_proto::SimpleRequest {
        payload: Some(interop_proto::Payload {
            r#type: 0,
            body: Bytes::from(vec![b'q'; payload]),
        }),
        response_size,
        ..Default::default()
    }
}

/// tonic's `SimpleRequest` asking for `response_size` bytes.
fn tonic_simple(response_size: i32) -> grpc_feature_tests::testing::SimpleRequest {
    grpc_feature_tests::testing::SimpleRequest {
        response_size,
        ..Default::default()
    }
}

/// Each encoding both ways between grpc-build's generated client and a tonic server: the request compressed
/// (tonic reports the `grpc-encoding` it decoded and the payload size), the response compressed by tonic
/// in the one encoding the call advertised, for unary and bidi calls.
#[tokio::test]
async fn every_encoding_round_trips_with_a_tonic_server() {
    let addr = tonic_server().await;
    for (encoding, _, name) in ENCODINGS {
        // The channel advertises nothing itself: the client's encoding is the only one tonic may pick.
        let channel = Channel::builder(target(addr))
            .accept_encodings([])
            .build()
            .expect("channel");
        let mut client = TestServiceClient::new(channel)
            .send_compressed(encoding)
            .accept_compressed(encoding);
        let response = tokio::time::timeout(NO_HANG, client.unary_call(simple(20_000, 30_000)))
            .await
            .expect("no hang")
            .unwrap_or_else(|s| panic!("{name}: {s:?}"));
        assert!(
            response.was_compressed(),
            "{name}: the response came compressed"
        );
        assert_eq!(response.metadata().get("x-seen-encoding"), Some(name));
        assert_eq!(response.metadata().get("x-seen-size"), Some("20000"));
        let body = response.into_inner().payload.expect("payload").body;
        assert!(
            body.len() == 30_000 && body.iter().all(|b| *b == b'z'),
            "{name}"
        );

        let requests: Vec<interop_proto::StreamingOutputCallRequest> = (0..3)
            .map(|i| interop_proto::StreamingOutputCallRequest {
                response_parameters: vec![interop_proto::ResponseParameters {
                    size: 5_000 + i,
                    ..Default::default()
                }],
                payload: Some(interop_proto::Payload {
                    r#type: 0,
                    body: Bytes::from(vec![b'r'; 4_000]),
                }),
                ..Default::default()
            })
            .collect();
        let response = tokio::time::timeout(
            NO_HANG,
            client.full_duplex_call(tokio_stream::iter(requests)),
        )
        .await
        .expect("no hang")
        .unwrap_or_else(|s| panic!("{name}: {s:?}"));
        assert_eq!(response.metadata().get("x-seen-encoding"), Some(name));
        let mut replies = response.into_inner();
        let mut sizes = Vec::new();
        while let Some(reply) = replies.message().await.expect("reply") {
            assert!(replies.last_message_compressed(), "{name}");
            sizes.push(reply.payload.expect("payload").body.len());
        }
        assert_eq!(sizes, [5_000, 5_001, 5_002], "{name}");
    }
}

/// What the channel advertises decides what tonic may compress with: gzip by default, nothing when the
/// channel advertises nothing (tonic then answers uncompressed).
#[tokio::test]
async fn tonic_compresses_only_with_what_the_channel_advertises() {
    let addr = tonic_server().await;
    let default = Channel::new(target(addr)).expect("channel");
    let response = TestServiceClient::new(default)
        .unary_call(simple(0, 1000))
        .await
        .expect("call");
    assert!(response.was_compressed());
    let none = Channel::builder(target(addr))
        .accept_encodings([])
        .build()
        .expect("channel");
    let response = TestServiceClient::new(none)
        .unary_call(simple(0, 1000))
        .await
        .expect("call");
    assert!(!response.was_compressed());
}

/// tonic clients over `ChannelService` with tonic's own `send_compressed` / `accept_compressed`: the
/// channel sends the requests in the tonic client's encoding and advertises what it advertises.
#[tokio::test]
async fn tonic_clients_over_channel_service_compress_both_ways() {
    let addr = tonic_server().await;
    for (_, tonic_encoding, name) in ENCODINGS {
        let channel = Channel::new(target(addr)).expect("channel");
        let mut client = TonicClient::new(ChannelService::new(channel))
            .send_compressed(tonic_encoding)
            .accept_compressed(tonic_encoding);
        let mut request = tonic_simple(30_000);
        request.payload = Some(grpc_feature_tests::testing::Payload {
            r#type: 0,
            body: vec![b'q'; 20_000],
        });
        let response = tokio::time::timeout(NO_HANG, client.unary_call(request))
            .await
            .expect("no hang")
            .unwrap_or_else(|s| panic!("{name}: {s:?}"));
        assert_eq!(
            response
                .metadata()
                .get("x-seen-encoding")
                .map(|v| v.to_str().ok()),
            Some(Some(name))
        );
        assert_eq!(
            response.into_inner().payload.expect("payload").body.len(),
            30_000
        );
    }
}

/// A request body of complete frames.
struct FramesBody(VecDeque<Bytes>);

impl Body for FramesBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
    }
}

/// Calls `UnaryCall` through `channel`'s adapter with a hand-built request advertising `accept`; returns the
/// response headers and the response body's messages (compressed flag, payload).
async fn adapter_unary(
    channel: Channel,
    accept: &str,
    response_size: i32,
) -> (http::HeaderMap, Vec<(u8, Vec<u8>)>) {
    let request = http::Request::builder()
        .method("POST")
        .uri("http://example.invalid/grpc.testing.TestService/UnaryCall")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-accept-encoding", accept)
        .body(FramesBody(VecDeque::from([frame(
            false,
            &tonic_simple(response_size).encode_to_vec(),
        )])))
        .expect("request");
    let response = tokio::time::timeout(NO_HANG, ChannelService::new(channel).call(request))
        .await
        .expect("no hang")
        .expect("response");
    let (parts, body) = response.into_parts();
    let mut body = std::pin::pin!(body);
    let mut data = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        if let Ok(d) = frame.expect("frame").into_data() {
            data.extend_from_slice(&d);
        }
    }
    let mut messages = Vec::new();
    let mut rest = &data[..];
    while rest.len() >= 5 {
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        messages.push((rest[0], rest[5..5 + len].to_vec()));
        rest = &rest[5 + len..];
    }
    (parts.headers, messages)
}

/// Without a receive limit of the channel's, a compressed reply reaches the tonic client still compressed,
/// with its `grpc-encoding` (tonic decompresses it under its own limit); with one, the channel decompresses
/// it under that limit and hands it on uncompressed.
#[tokio::test]
async fn the_adapter_passes_compressed_replies_through_unless_the_channel_has_a_limit() {
    let addr = tonic_server().await;
    let channel = Channel::new(target(addr)).expect("channel");
    let (headers, messages) = adapter_unary(channel, "zstd", 10_000).await;
    assert_eq!(
        headers.get("grpc-encoding").map(|v| v.as_bytes()),
        Some(&b"zstd"[..])
    );
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].0, 1, "still compressed");
    let reply = zstd::decode_all(&messages[0].1[..]).expect("zstd");
    let reply = grpc_feature_tests::testing::SimpleResponse::decode(&reply[..]).expect("decode");
    assert_eq!(reply.payload.expect("payload").body.len(), 10_000);

    let limited = Channel::builder(target(addr))
        .max_receive_message_size(1 << 20)
        .build()
        .expect("channel");
    let (headers, messages) = adapter_unary(limited, "zstd", 10_000).await;
    assert!(headers.get("grpc-encoding").is_none());
    assert_eq!(messages[0].0, 0, "decompressed by the channel");
    let reply =
        grpc_feature_tests::testing::SimpleResponse::decode(&messages[0].1[..]).expect("decode");
    assert_eq!(reply.payload.expect("payload").body.len(), 10_000);

    // A request advertising nothing: tonic answers uncompressed.
    let channel = Channel::new(target(addr)).expect("channel");
    let (headers, messages) = adapter_unary(channel, "identity", 100).await;
    assert!(headers.get("grpc-encoding").is_none());
    assert_eq!(messages[0].0, 0);
}

/// The case: a tonic client with `max_decoding_message_size(16 MiB)` over `ChannelService` gets an
/// 8 MiB reply, compressed or not, although the channel's default limit is 4 MiB; with tonic's own default
/// (4 MiB) tonic refuses it, by its own limit.
#[tokio::test]
async fn the_tonic_client_s_own_limit_governs_through_the_adapter() {
    let interop = interop_server().await;
    let tonic = tonic_server().await;
    for (addr, accept) in [
        (interop, None),
        (tonic, None),
        (tonic, Some(CompressionEncoding::Gzip)),
    ] {
        let channel = Channel::new(target(addr)).expect("channel");
        let mut client = TonicClient::new(ChannelService::new(channel.clone()))
            .max_decoding_message_size(16 << 20);
        if let Some(enc) = accept {
            client = client.accept_compressed(enc);
        }
        let response = tokio::time::timeout(NO_HANG, client.unary_call(tonic_simple(EIGHT_MIB)))
            .await
            .expect("no hang")
            .unwrap_or_else(|s| panic!("{accept:?}: {s:?}"));
        assert_eq!(
            response.into_inner().payload.expect("payload").body.len(),
            EIGHT_MIB as usize
        );

        let mut tonic_default = TonicClient::new(ChannelService::new(channel));
        if let Some(enc) = accept {
            tonic_default = tonic_default.accept_compressed(enc);
        }
        let status = tonic_default
            .unary_call(tonic_simple(EIGHT_MIB))
            .await
            .expect_err("over tonic's default limit");
        assert!(
            status.message().contains("4194304") && !status.message().contains("max_receive"),
            "tonic's own limit, not the channel's: {status:?}"
        );
    }
}

/// A receive limit set on the channel applies through the adapter too, and its error names it; for a reply
/// compressed because the tonic client advertised gzip, it says so.
#[tokio::test]
async fn a_channel_limit_applies_through_the_adapter_and_names_itself() {
    let tonic = tonic_server().await;
    let channel = Channel::builder(target(tonic))
        .max_receive_message_size(1 << 20)
        .build()
        .expect("channel");
    let mut client =
        TonicClient::new(ChannelService::new(channel.clone())).max_decoding_message_size(16 << 20);
    let status = client
        .unary_call(tonic_simple(2 << 20))
        .await
        .expect_err("over the channel's limit");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().starts_with(
            "response message larger than the limit (2097162 vs. 1048576 bytes: the channel's \
             max_receive_message_size, set with ChannelBuilder::max_receive_message_size"
        ),
        "{status:?}"
    );
    let mut compressed = TonicClient::new(ChannelService::new(channel))
        .max_decoding_message_size(16 << 20)
        .accept_compressed(CompressionEncoding::Gzip);
    let status = compressed
        .unary_call(tonic_simple(2 << 20))
        .await
        .expect_err("over the channel's limit once decompressed");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    let message = status.message();
    assert!(
        message.starts_with(
            "response message larger than the limit once decompressed (more than 1048576 bytes from"
        ) && message.contains("the channel's max_receive_message_size")
            && message
                .ends_with("it came compressed because the call advertised gzip in grpc-accept-encoding"),
        "{status:?}"
    );
}

mod tonic_peer {
    //! A tonic TestService (tonic's generated server on hyper) that compresses its responses with whichever of
    //! gzip, deflate and zstd the client advertises first and accepts requests compressed with any of them:
    //! the tonic peer of the compression tests. `UnaryCall` answers `response_size` bytes and reports in its
    //! response metadata the request's `grpc-encoding` (`x-seen-encoding`, `-` when absent) and the size of
    //! the request payload it decoded (`x-seen-size`); `FullDuplexCall` answers each request with one message of
    //! its first response size, with the same `x-seen-encoding`. The rest answer UNIMPLEMENTED.

    use std::net::SocketAddr;

    use grpc_feature_tests::testing::test_service_server::{TestService, TestServiceServer};
    use grpc_feature_tests::testing::{
        Payload, SimpleRequest, SimpleResponse, StreamingOutputCallRequest,
        StreamingOutputCallResponse,
    };
    use tokio_stream::StreamExt as _;
    use tonic::codec::CompressionEncoding;
    use tonic::metadata::MetadataValue;
    use tonic::{Request, Response, Status, Streaming};

    struct Peer;

    fn payload(size: i32) -> Option<Payload> {
        Some(Payload {
            r#type: 0,
            body: vec![b'z'; usize::try_from(size).unwrap_or(0)],
        })
    }

    fn seen_encoding<T>(request: &Request<T>) -> MetadataValue<tonic::metadata::Ascii> {
        request
            .metadata()
            .get("grpc-encoding")
            .cloned()
            .unwrap_or_else(|| MetadataValue::from_static("-"))
    }

    #[tonic::async_trait]
    impl TestService for Peer {
        async fn unary_call(
            &self,
            request: Request<SimpleRequest>,
        ) -> Result<Response<SimpleResponse>, Status> {
            let encoding = seen_encoding(&request);
            let request = request.into_inner();
            let size = request.payload.map_or(0, |p| p.body.len());
            let mut response = Response::new(SimpleResponse {
                payload: payload(request.response_size),
                ..Default::default()
            });
            let md = response.metadata_mut();
            md.insert("x-seen-encoding", encoding);
            md.insert("x-seen-size", size.into());
            Ok(response)
        }

        async fn full_duplex_call(
            &self,
            request: Request<Streaming<StreamingOutputCallRequest>>,
        ) -> Result<Response<tonic::codegen::BoxStream<StreamingOutputCallResponse>>, Status>
        {
            let encoding = seen_encoding(&request);
            let answers = request.into_inner().map(|r| {
                r.map(|req| StreamingOutputCallResponse {
                    payload: payload(req.response_parameters.first().map_or(0, |p| p.size)),
                    ..Default::default()
                })
            });
            let mut response = Response::new(Box::pin(answers) as tonic::codegen::BoxStream<_>);
            response.metadata_mut().insert("x-seen-encoding", encoding);
            Ok(response)
        }
    }

    /// Starts the tonic server on a free loopback port; it serves until the test's runtime ends.
    pub(crate) async fn tonic_server() -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut service = TestServiceServer::new(Peer)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        for encoding in [
            CompressionEncoding::Gzip,
            CompressionEncoding::Deflate,
            CompressionEncoding::Zstd,
        ] {
            service = service
                .send_compressed(encoding)
                .accept_compressed(encoding);
        }
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        tokio::spawn(tonic::transport::Server::builder().serve_with_incoming(service, incoming));
        addr
    }
}
