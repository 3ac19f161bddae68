//! A retry policy from a default service config (gRFC A6): UNAVAILABLE is retried with backoff, and the
//! channel's statistics show what happened. The interop server fails on demand through `response_status`.

use grpc_channel::{Channel, Code};
use interop_proto::test_service_client::TestServiceClient;
use interop_proto::{EchoStatus, SimpleRequest};

const CONFIG: &str = r#"{
  "methodConfig": [{
    "name": [{"service": "grpc.testing.TestService"}],
    "retryPolicy": {
      "maxAttempts": 3,
      "initialBackoff": "0.01s",
      "maxBackoff": "0.1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let channel = Channel::builder(grpc_examples::target())
        .default_service_config(CONFIG)
        .build()?;
    let mut client = TestServiceClient::new(channel.clone());
    client.unary_call(SimpleRequest::default()).await?;
    // This one always fails UNAVAILABLE: three attempts, then the status.
    let status = client
        .unary_call(SimpleRequest {
            response_status: Some(EchoStatus {
                code: Code::Unavailable as i32,
                message: "try again".into(),
            }),
            ..Default::default()
        })
        .await
        .expect_err("UNAVAILABLE every time");
    println!("after retries: {status}");
    let stats = channel.stats();
    let method = &stats.methods["/grpc.testing.TestService/UnaryCall"];
    println!(
        "UnaryCall: {} calls, {} attempts, {} retries",
        method.calls, method.attempts, method.retries
    );
    if method.retries != 2 {
        return Err(format!("expected 2 retries, saw {}", method.retries).into());
    }
    Ok(())
}
