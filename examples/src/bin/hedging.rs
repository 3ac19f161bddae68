//! Hedging across backends (gRFC A6): with round_robin over several servers, a call that has no answer
//! after the hedging delay is sent again, to a backend it has not used yet; the first answer wins and the
//! others are cancelled. Give it two or more backends: `--target=ipv4:127.0.0.1:P1,127.0.0.1:P2`.

use grpc_channel::Channel;
use interop_proto::test_service_client::TestServiceClient;
use interop_proto::{ResponseParameters, SimpleRequest, StreamingOutputCallRequest};

const CONFIG: &str = r#"{
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [{
    "name": [{"service": "grpc.testing.TestService", "method": "StreamingOutputCall"}],
    "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.05s", "nonFatalStatusCodes": ["UNAVAILABLE"]}
  }]
}"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let channel = Channel::builder(grpc_examples::target())
        .default_service_config(CONFIG)
        .build()?;
    let mut client = TestServiceClient::new(channel.clone());
    let mut servers = std::collections::BTreeSet::new();
    for _ in 0..10 {
        let response = client
            .unary_call(SimpleRequest {
                fill_server_id: true,
                ..Default::default()
            })
            .await?;
        servers.insert(response.into_inner().server_id);
    }
    println!("round_robin: unary calls answered by {servers:?}");
    // A slow answer (the server waits 150 ms before its one message): hedges go out at 50 and 100 ms.
    for _ in 0..3 {
        let request = StreamingOutputCallRequest {
            response_parameters: vec![ResponseParameters {
                size: 8,
                interval_us: 150_000,
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut stream = client.streaming_output_call(request).await?.into_inner();
        while stream.message().await?.is_some() {}
    }
    let stats = channel.stats();
    let method = &stats.methods["/grpc.testing.TestService/StreamingOutputCall"];
    println!(
        "hedged calls: {} calls, {} attempts, {} hedges",
        method.calls, method.attempts, method.hedges
    );
    if method.hedges == 0 {
        return Err("expected hedges for the slow calls".into());
    }
    Ok(())
}
