//! Compression against Python grpcio (C-core), an independent implementation: grpc-build's generated client
//! with gzip and deflate both ways, and zstd, which C-core does not implement (it is tonic's extension, not
//! in the gRPC spec): a zstd request is refused (INTERNAL from C-core's header parser, where the spec has a
//! server answer UNIMPLEMENTED). And a grpcio application that forces a response algorithm gets it even when
//! the client did not advertise it, which the channel refuses with INTERNAL, as the spec asks.
//!
//! Needs the grpcio virtualenv (see `support::grpcio`); without it the test says so and passes, unless
//! `GRPCIO_PEER_REQUIRED` is set.

use grpc_test_support as support;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Encoding, Request};
use interop_proto::test_service_client::TestServiceClient;
use interop_proto::{BoolValue, Payload, SimpleRequest, SimpleResponse};
use support::guards::NO_HANG;

/// A `UnaryCall` with `payload` bytes, asking for a compressed response of `size` bytes, compressed with
/// `algorithm` (the grpcio server's `x-test-response-compression`).
fn compressed_reply(payload: usize, size: i32, algorithm: &str) -> Request<SimpleRequest> {
    let mut request = Request::new(SimpleRequest {
        payload: Some(Payload {
            r#type: 0,
            body: Bytes::from(vec![b'q'; payload]),
        }),
        response_size: size,
        response_compressed: Some(BoolValue { value: true }),
        ..Default::default()
    });
    request
        .metadata_mut()
        .append("x-test-response-compression", algorithm)
        .expect("metadata");
    request
}

async fn unary(
    client: &mut TestServiceClient,
    request: Request<SimpleRequest>,
) -> Result<grpc_channel::Response<SimpleResponse>, grpc_channel::Status> {
    tokio::time::timeout(NO_HANG, client.unary_call(request))
        .await
        .expect("no hang")
}

fn body_len(response: grpc_channel::Response<SimpleResponse>) -> usize {
    response.into_inner().payload.map_or(0, |p| p.body.len())
}

/// One server for every case: a process per test would start Python and protoc each time.
#[tokio::test]
async fn compression_against_grpcio() {
    let Some(server) = support::grpcio::start() else {
        return;
    };
    let target = format!("ipv4:{}", server.addr);

    // gzip and deflate, both ways: the request compressed (grpcio reports the payload it decoded), the
    // response compressed by C-core in the one encoding the call advertised.
    for (encoding, name) in [(Encoding::Gzip, "gzip"), (Encoding::Deflate, "deflate")] {
        let channel = Channel::builder(&target)
            .accept_encodings([encoding])
            .build()
            .expect("channel");
        let mut client = TestServiceClient::new(channel).send_compressed(encoding);
        let response = unary(&mut client, compressed_reply(20_000, 30_000, name))
            .await
            .unwrap_or_else(|s| panic!("{name}: {s:?}"));
        assert!(
            response.was_compressed(),
            "{name}: the response came compressed"
        );
        assert_eq!(
            response.trailers().get("x-seen-size"),
            Some("20000"),
            "{name}"
        );
        assert_eq!(body_len(response), 30_000, "{name}");
    }

    // zstd: C-core cannot decode it. doc/compression.md says a server answers an encoding it does not
    // support with UNIMPLEMENTED; C-core (grpcio 1.85) fails earlier: its HPACK parser refuses the unknown
    // `grpc-encoding` value, and the call ends with INTERNAL "Error parsing 'grpc-encoding' metadata".
    // Either way the call fails unprocessed, and zstd is for tonic peers only.
    let channel = Channel::new(&target).expect("channel");
    let mut zstd = TestServiceClient::new(channel.clone()).send_compressed(Encoding::Zstd);
    let status = unary(&mut zstd, compressed_reply(100, 10, "gzip"))
        .await
        .expect_err("grpcio has no zstd");
    eprintln!(
        "grpcio's answer to a zstd request: {status:?} {:?}",
        status.metadata()
    );
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert_eq!(status.message(), "Error parsing 'grpc-encoding' metadata");
    // The same client, told to send this request uncompressed, works.
    let response = unary(
        &mut zstd,
        compressed_reply(100, 10, "gzip").with_compression(Encoding::Identity),
    )
    .await
    .expect("uncompressed");
    assert_eq!(response.trailers().get("x-seen-size"), Some("100"));

    // A grpcio application that forces an algorithm (`context.set_compression`, as this server does when
    // asked for a compressed response) gets it whatever the client advertised: C-core does not fall back to
    // identity as doc/compression.md asks of servers. The channel decodes only what it advertises, so the
    // call fails with INTERNAL saying how to accept the encoding; accepting it on the call makes it work.
    for accept in [vec![Encoding::Zstd], vec![]] {
        let channel = Channel::builder(&target)
            .accept_encodings(accept.clone())
            .build()
            .expect("channel");
        let mut client = TestServiceClient::new(channel);
        for (encoding, algorithm) in [(Encoding::Gzip, "gzip"), (Encoding::Deflate, "deflate")] {
            let status = unary(&mut client, compressed_reply(0, 1000, algorithm))
                .await
                .expect_err("compressed with an encoding the call did not advertise");
            assert_eq!(status.code(), Code::Internal, "{status:?}");
            assert!(
                status.message().starts_with(&format!(
                    "the server compressed a response message with {algorithm}, which the call did \
                     not advertise"
                )),
                "{accept:?}: {status:?}"
            );
            let response = unary(
                &mut client,
                compressed_reply(0, 1000, algorithm).with_accept_compressed(encoding),
            )
            .await
            .unwrap_or_else(|s| panic!("{accept:?} {algorithm} accepted: {s:?}"));
            assert!(response.was_compressed());
            assert_eq!(body_len(response), 1000);
        }
        // Not asked to compress, grpcio answers uncompressed.
        let mut plain = SimpleRequest {
            response_size: 10,
            ..Default::default()
        };
        plain.response_compressed = Some(BoolValue { value: false });
        let response = unary(&mut client, Request::new(plain))
            .await
            .expect("uncompressed");
        assert!(!response.was_compressed());
    }

    // The channel's default (gzip advertised) gets gzip.
    let mut plain = TestServiceClient::new(channel);
    let response = unary(&mut plain, compressed_reply(0, 1000, "gzip"))
        .await
        .expect("gzip");
    assert!(response.was_compressed());
    drop(server);
}
