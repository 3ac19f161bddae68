//! Interceptors: one on the channel adds a token to every call; one on a client refuses some calls before
//! anything is sent.

use grpc_channel::{CallInfo, Channel, Code, Status};
use interop_proto::test_service_client::TestServiceClient;
use interop_proto::{Empty, SimpleRequest};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let token = "s3cret".to_owned();
    let channel = Channel::builder(grpc_examples::target())
        .interceptor(move |call: &mut CallInfo<'_>| {
            call.metadata_mut()
                .append("authorization", &format!("Bearer {token}"))
                .map_err(|e| Status::new(Code::Internal, e.to_string()))
        })
        .build()?;
    // The interop server echoes x-grpc-test-echo-initial: show that interceptor metadata goes out too.
    let mut client = TestServiceClient::new(channel.clone());
    client.empty_call(Empty::default()).await?;
    println!("a call went out with the token");

    let mut read_only = TestServiceClient::with_interceptor(channel, |call: &mut CallInfo<'_>| {
        if call.method().ends_with("/UnaryCall") {
            return Err(Status::new(Code::PermissionDenied, "read-only client"));
        }
        Ok(())
    });
    let status = read_only
        .unary_call(SimpleRequest::default())
        .await
        .expect_err("refused");
    println!("refused before sending: {status}");
    read_only.empty_call(Empty::default()).await?;
    Ok(())
}
