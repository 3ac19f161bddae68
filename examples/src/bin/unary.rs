//! A unary call with a generated client: a message with a timeout and metadata, and the status of a
//! failed call.

use std::time::Duration;

use grpc_channel::{Channel, Code, Request};
use interop_proto::test_service_client::TestServiceClient;
use interop_proto::{EchoStatus, SimpleRequest};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let channel = Channel::new(grpc_examples::target())?; // connects on the first call
    let mut client = TestServiceClient::new(channel);

    let mut request = Request::new(SimpleRequest {
        response_size: 10,
        ..Default::default()
    })
    .with_timeout(Duration::from_secs(5));
    request.metadata_mut().append("x-example", "unary")?;
    let response = client.unary_call(request).await?;
    println!(
        "got {} bytes",
        response
            .get_ref()
            .payload
            .as_ref()
            .map_or(0, |p| p.body.len())
    );

    // A status the server chose, with its message.
    let failed = client
        .unary_call(SimpleRequest {
            response_status: Some(EchoStatus {
                code: Code::NotFound as i32,
                message: "no such thing".into(),
            }),
            ..Default::default()
        })
        .await;
    match failed {
        Err(status) if status.code() == Code::NotFound => println!("as expected: {status}"),
        other => return Err(format!("expected NOT_FOUND, got {other:?}").into()),
    }
    Ok(())
}
