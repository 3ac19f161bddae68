//! tonic-generated clients calling through `grpc_channel::tower::ChannelService`, over real loopback sockets:
//! the interop server's four call shapes, metadata both ways, a status with its message, a deadline, and a
//! retry policy from the channel's service config, seen on the server.

use grpc_test_support as support;

use std::net::SocketAddr;
use std::time::Duration;

use grpc_channel::tower::ChannelService;
use grpc_channel::Channel;
use grpc_feature_tests::fault::faulty_client::FaultyClient;
use grpc_feature_tests::testing::test_service_client::TestServiceClient;
use grpc_feature_tests::testing::{
    EchoStatus, Payload, ResponseParameters, SimpleRequest, StreamingInputCallRequest,
    StreamingOutputCallRequest,
};
use support::config::retry_config;
use support::guards::NO_HANG;
use support::interop_server;

fn client(addr: SocketAddr) -> TestServiceClient<ChannelService> {
    let channel = Channel::new(format!("ipv4:{addr}")).expect("channel");
    TestServiceClient::new(ChannelService::new(channel))
}

fn payload(n: usize) -> Option<Payload> {
    Some(Payload {
        r#type: 0,
        body: vec![0; n],
    })
}

#[tokio::test]
async fn unary_with_metadata_both_ways() {
    let mut client = client(interop_server().await);
    let mut request = tonic::Request::new(SimpleRequest {
        response_size: 1000,
        payload: payload(2000),
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("x-grpc-test-echo-initial", "hello".parse().expect("value"));
    request.metadata_mut().insert_bin(
        "x-grpc-test-echo-trailing-bin",
        tonic::metadata::MetadataValue::from_bytes(&[0xab, 0xcd]),
    );
    let response = tokio::time::timeout(NO_HANG, client.unary_call(request))
        .await
        .expect("no hang")
        .expect("unary call");
    assert_eq!(
        response
            .metadata()
            .get("x-grpc-test-echo-initial")
            .and_then(|v| v.to_str().ok()),
        Some("hello")
    );
    assert_eq!(
        response
            .metadata()
            .get_bin("x-grpc-test-echo-trailing-bin")
            .and_then(|v| v.to_bytes().ok())
            .map(|b| b.to_vec()),
        Some(vec![0xab, 0xcd]),
        "trailing metadata reaches tonic (it merges trailers into the response metadata)"
    );
    assert_eq!(
        response.into_inner().payload.map(|p| p.body.len()),
        Some(1000)
    );
}

#[tokio::test]
async fn server_streaming_client_streaming_and_bidi() {
    let mut client = client(interop_server().await);
    // Server streaming.
    let request = StreamingOutputCallRequest {
        response_parameters: [31415, 9, 2653, 58979]
            .iter()
            .map(|&size| ResponseParameters {
                size,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let mut stream = client
        .streaming_output_call(request)
        .await
        .expect("server streaming")
        .into_inner();
    let mut sizes = Vec::new();
    while let Some(m) = stream.message().await.expect("message") {
        sizes.push(m.payload.map(|p| p.body.len()).unwrap_or(0));
    }
    assert_eq!(sizes, vec![31415, 9, 2653, 58979]);
    // Client streaming.
    let requests: Vec<StreamingInputCallRequest> = [27182, 8, 1828, 45904]
        .iter()
        .map(|&n| StreamingInputCallRequest {
            payload: payload(n),
            ..Default::default()
        })
        .collect();
    let response = tokio::time::timeout(
        NO_HANG,
        client.streaming_input_call(tokio_stream::iter(requests)),
    )
    .await
    .expect("no hang")
    .expect("client streaming");
    assert_eq!(response.into_inner().aggregated_payload_size, 74922);
    // Bidi.
    let requests: Vec<StreamingOutputCallRequest> = [31415, 9, 2653]
        .iter()
        .map(|&size| StreamingOutputCallRequest {
            response_parameters: vec![ResponseParameters {
                size,
                ..Default::default()
            }],
            payload: payload(1),
            ..Default::default()
        })
        .collect();
    let mut stream = client
        .full_duplex_call(tokio_stream::iter(requests))
        .await
        .expect("bidi")
        .into_inner();
    let mut sizes = Vec::new();
    while let Some(m) = stream.message().await.expect("message") {
        sizes.push(m.payload.map(|p| p.body.len()).unwrap_or(0));
    }
    assert_eq!(sizes, vec![31415, 9, 2653]);
}

#[tokio::test]
async fn statuses_and_deadlines_reach_tonic() {
    let mut client = client(interop_server().await);
    let status = client
        .unary_call(SimpleRequest {
            response_status: Some(EchoStatus {
                code: 2,
                message: "test status message \t\n café".into(),
            }),
            ..Default::default()
        })
        .await
        .expect_err("UNKNOWN");
    assert_eq!(status.code(), tonic::Code::Unknown);
    assert_eq!(status.message(), "test status message \t\n café");
    // A deadline set on the tonic request (grpc-timeout) bounds the call.
    let mut request = tonic::Request::new(StreamingOutputCallRequest {
        response_parameters: vec![ResponseParameters {
            size: 1,
            interval_us: 5_000_000,
            ..Default::default()
        }],
        ..Default::default()
    });
    request.set_timeout(Duration::from_millis(200));
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(NO_HANG, async {
        let mut stream = client.streaming_output_call(request).await?.into_inner();
        while stream.message().await?.is_some() {}
        Ok::<_, tonic::Status>(())
    })
    .await
    .expect("no hang");
    let status = result.expect_err("the deadline passes");
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test(start_paused = true)]
async fn the_channels_retry_policy_applies_to_a_tonic_client() {
    let server = interop::faulty::FaultyServer::start()
        .await
        .expect("faulty server");
    let channel = Channel::builder(format!("ipv4:{}", server.addr))
        .default_service_config(retry_config(4, &["UNAVAILABLE"]))
        .build()
        .expect("channel");
    let mut client = FaultyClient::new(ChannelService::new(channel));
    let mut request = tonic::Request::new(());
    request
        .metadata_mut()
        .insert("x-test-key", "tonic".parse().expect("value"));
    request
        .metadata_mut()
        .insert("x-fail-times", "2".parse().expect("value"));
    let response = client
        .flaky(request)
        .await
        .expect("the third attempt succeeds");
    assert_eq!(
        response
            .metadata()
            .get("x-attempt")
            .and_then(|v| v.to_str().ok()),
        Some("3"),
        "the server saw three attempts"
    );
}
