//! A tonic TestService (tonic's generated server on hyper) that compresses its responses with whichever of
//! gzip, deflate and zstd the client advertises first and accepts requests compressed with any of them:
//! the tonic peer of the compression tests. `UnaryCall` answers `response_size` bytes and reports in its
//! response metadata the request's `grpc-encoding` (`x-seen-encoding`, `-` when absent) and the size of
//! the request payload it decoded (`x-seen-size`); `FullDuplexCall` answers each request with one message of
//! its first response size, with the same `x-seen-encoding`. The rest answer UNIMPLEMENTED.

use std::net::SocketAddr;

use grpc_feature_tests::testing::test_service_server::{TestService, TestServiceServer};
use grpc_feature_tests::testing::{
    Payload, SimpleRequest, SimpleResponse, StreamingOutputCallRequest, StreamingOutputCallResponse,
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
    ) -> Result<Response<tonic::codegen::BoxStream<StreamingOutputCallResponse>>, Status> {
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
pub async fn tonic_server() -> SocketAddr {
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
