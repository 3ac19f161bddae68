//! Server streaming, client streaming from a `Stream`, and bidi with a generated client.

use grpc_channel::Channel;
use interop_proto::test_service_client::TestServiceClient;
use interop_proto::{
    Payload, ResponseParameters, StreamingInputCallRequest, StreamingOutputCallRequest,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut client = TestServiceClient::new(Channel::new(grpc_examples::target())?);

    // Server streaming: the server answers with one message per response parameter.
    let request = StreamingOutputCallRequest {
        response_parameters: [1, 2, 3]
            .into_iter()
            .map(|size| ResponseParameters {
                size,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let mut stream = client.streaming_output_call(request).await?.into_inner();
    let mut sizes = Vec::new();
    while let Some(message) = stream.message().await? {
        sizes.push(message.payload.map_or(0, |p| p.body.len()));
    }
    println!("server streaming: {sizes:?}");

    // Client streaming from any Stream.
    let requests = (0..4).map(|i| StreamingInputCallRequest {
        payload: Some(Payload {
            body: vec![0; 10 * (i + 1)].into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let total = client
        .streaming_input_call(tokio_stream::iter(requests))
        .await?
        .into_inner()
        .aggregated_payload_size;
    println!("client streaming: the server counted {total} bytes");

    // Bidi: each request asks for one response.
    let requests = [5, 6, 7].map(|size| StreamingOutputCallRequest {
        response_parameters: vec![ResponseParameters {
            size,
            ..Default::default()
        }],
        ..Default::default()
    });
    let mut replies = client
        .full_duplex_call(tokio_stream::iter(requests))
        .await?
        .into_inner();
    while let Some(reply) = replies.message().await? {
        println!("bidi: {} bytes", reply.payload.map_or(0, |p| p.body.len()));
    }
    Ok(())
}
