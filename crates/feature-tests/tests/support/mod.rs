//! What the spans and metrics tests share: a call retried twice against the fault-injecting server.

use bytes::Bytes;
use grpc_channel::{Channel, Request};
use interop::faulty::{methods, FaultyServer};

pub(crate) const CONFIG: &str = r#"{"methodConfig":[{"name":[{"service":"fault.Faulty"}],"retryPolicy":{"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}"#;

pub(crate) async fn retried_call(server: &FaultyServer) -> Channel {
    let channel = Channel::builder(format!("ipv4:{}", server.addr))
        .default_service_config(CONFIG)
        .build()
        .expect("channel");
    let mut request = Request::new(Bytes::new());
    request
        .metadata_mut()
        .append("x-test-key", "observed")
        .expect("key");
    request
        .metadata_mut()
        .append("x-fail-times", "2")
        .expect("header");
    let response = channel
        .unary_raw(methods::FLAKY, request)
        .await
        .expect("the third attempt succeeds");
    assert_eq!(response.trailers().get("x-attempt"), Some("3"));
    channel
}
