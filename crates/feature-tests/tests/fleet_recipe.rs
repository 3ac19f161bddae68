//! The README's fleet recipe, word for word (checked below), against three of the project's interop servers
//! on loopback: one healthy, one whose health service says NOT_SERVING, one failing every `UnaryCall` with
//! UNAVAILABLE. Every call succeeds (health checking keeps calls off the second, retries move the third's
//! failures to the first), outlier detection ejects the failing backend at its first sweep, and from then on
//! every call goes to the healthy one; a `StreamingOutputCall` whose first response is slow is hedged. On
//! tokio's paused clock: the sweep interval and the slow response pass without waiting.

use std::collections::HashMap;

use grpc_channel::lb::Health;
use grpc_channel::{ConnectivityState, Status};
use grpc_test_support::guards::{guarded, settle};
use interop::health::ServingStatus;
use interop::server::{self, ServerOptions};
use interop_proto::grpc_testing::test_service_client::TestServiceClient;
use interop_proto::grpc_testing::{ResponseParameters, SimpleRequest, StreamingOutputCallRequest};

// README:begin
use std::time::Duration;

use grpc_channel::{BuildError, Channel};

/// The service config (gRFC A2): JSON, from the application here (or from DNS TXT, which wins unless
/// `service_config_lookup(false)`).
const FLEET: &str = r#"{
  "loadBalancingConfig": [{"outlier_detection_experimental": {
    "interval": "10s",
    "baseEjectionTime": "30s",
    "maxEjectionTime": "300s",
    "maxEjectionPercent": 33,
    "failurePercentageEjection": {
      "threshold": 50, "enforcementPercentage": 100, "minimumHosts": 2, "requestVolume": 10 },
    "childPolicy": [{"round_robin": {}}] }}],
  "healthCheckConfig": {"serviceName": ""},
  "retryThrottling": {"maxTokens": 10, "tokenRatio": 1},
  "methodConfig": [{
    "name": [{"service": "grpc.testing.TestService", "method": "UnaryCall"}],
    "timeout": "2s",
    "retryPolicy": {
      "maxAttempts": 3, "initialBackoff": "0.05s", "maxBackoff": "1s", "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"] }
  }, {
    "name": [{"service": "grpc.testing.TestService", "method": "StreamingOutputCall"}],
    "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.1s", "nonFatalStatusCodes": ["UNAVAILABLE"]}
  }]
}"#;

/// A channel to a fleet: `target` is `dns:///orders.internal:50051`, `ipv4:10.0.0.1:50051,10.0.0.2:50051`,
/// or any scheme below.
fn fleet_channel(target: &str) -> Result<Channel, BuildError> {
    Channel::builder(target)
        .default_service_config(FLEET)
        // Every call that sets no timeout of its own gets 5 s; a method config's `timeout` applies too,
        // and the smaller deadline wins (UnaryCall: 2 s).
        .timeout(Duration::from_secs(5))
        // tonic's http2_keep_alive_interval. grpc-go, grpc-java and C-core servers allow one PING per
        // 5 minutes by default, and the health Watch keeps a stream open on every connection: a shorter
        // time earns GOAWAY too_many_pings.
        .keepalive_time(Duration::from_secs(300))
        .build()
}
// README:end

/// Which server answered each of `n` unary calls (all must succeed), by its listening address.
async fn unary_calls(client: &mut TestServiceClient, n: usize) -> HashMap<String, usize> {
    let mut served = HashMap::new();
    for i in 0..n {
        let request = SimpleRequest {
            fill_server_id: true,
            ..SimpleRequest::default()
        };
        let response = client
            .unary_call(request)
            .await
            .unwrap_or_else(|status: Status| panic!("call {i} failed: {status}"))
            .into_inner();
        *served.entry(response.server_id).or_default() += 1;
    }
    served
}

#[tokio::test(start_paused = true)]
async fn the_readme_fleet_recipe_keeps_every_call_off_the_sick_backends() {
    guarded("the fleet scenario", fleet_scenario()).await;
}

async fn fleet_scenario() {
    let any = "127.0.0.1:0".parse().expect("addr");
    let healthy = server::start(any).await.expect("healthy server");
    let not_serving = server::start(any).await.expect("not-serving server");
    not_serving.health().set("", ServingStatus::NotServing);
    let failing = server::start_with(
        any,
        ServerOptions::new().fail_unary_calls(Status::unavailable("sick")),
    )
    .await
    .expect("failing server");
    let target = format!(
        "ipv4:{},{},{}",
        healthy.addr, not_serving.addr, failing.addr
    );
    let channel = fleet_channel(&target).expect("the recipe builds");
    channel.ready().await.expect("a backend is ready");
    let mut client = TestServiceClient::new(channel.clone());

    // Before the first sweep: the failing backend takes its turn, and its failures are retried elsewhere.
    let served = unary_calls(&mut client, 40).await;
    assert_eq!(
        served.get(&not_serving.addr.to_string()),
        None,
        "health checking keeps calls off the NOT_SERVING backend: {served:?}"
    );
    assert_eq!(
        served.get(&healthy.addr.to_string()),
        Some(&40),
        "every call ends on the healthy backend: {served:?}"
    );
    let stats = channel.stats();
    assert_eq!(
        stats.not_serving_addresses,
        [not_serving.addr.to_string()],
        "{stats:?}"
    );
    assert!(
        stats.methods["/grpc.testing.TestService/UnaryCall"].retries >= 10,
        "the failing backend's attempts were retried: {stats:?}"
    );
    // Where the calls went, per address.
    let at = |addr: std::net::SocketAddr| stats.addresses[&addr.to_string()];
    assert_eq!(stats.addresses.len(), 3, "{stats:?}");
    let (good, out, sick) = (at(healthy.addr), at(not_serving.addr), at(failing.addr));
    assert_eq!(good.calls_started, good.calls_succeeded, "{good:?}");
    assert_eq!(
        good.calls_succeeded, 40,
        "every call succeeded there: {good:?}"
    );
    assert_eq!(good.health, Some(Health::Serving));
    assert_eq!(out.calls_started, 0, "{out:?}");
    assert_eq!(out.state, ConnectivityState::Ready, "connected, not used");
    assert_eq!(out.health, Some(Health::NotServing));
    assert!(sick.calls_failed >= 10, "{sick:?}");
    assert_eq!(sick.calls_succeeded, 0, "{sick:?}");

    // The sweep at 10 s ejects the backend that failed every one of its calls.
    settle(Duration::from_secs(11)).await;
    assert_eq!(
        channel.stats().ejected_addresses,
        [failing.addr.to_string()],
        "outlier detection ejected the failing backend"
    );
    let retries_before = channel.stats().methods["/grpc.testing.TestService/UnaryCall"].retries;
    let served = unary_calls(&mut client, 20).await;
    assert_eq!(served.get(&healthy.addr.to_string()), Some(&20));
    assert_eq!(
        channel.stats().methods["/grpc.testing.TestService/UnaryCall"].retries,
        retries_before,
        "with the failing backend ejected, no call needs a retry"
    );

    // The hedged method: its first response (and so its response headers) comes after 0.5 s, past the
    // 0.1 s hedging delay, so hedges go out (without the recipe's hedgingPolicy, none would).
    let request = StreamingOutputCallRequest {
        response_parameters: vec![ResponseParameters {
            size: 8,
            interval_us: 500_000,
            ..ResponseParameters::default()
        }],
        ..StreamingOutputCallRequest::default()
    };
    let mut stream = client
        .streaming_output_call(request)
        .await
        .expect("hedged call")
        .into_inner();
    let first = stream.message().await.expect("a message");
    assert!(first.is_some(), "one response message");
    assert!(
        stream.message().await.expect("the end").is_none(),
        "one message"
    );
    let stats = channel.stats();
    let hedged = &stats.methods["/grpc.testing.TestService/StreamingOutputCall"];
    assert!(hedged.hedges >= 1, "the slow call was hedged: {hedged:?}");
    channel.close();
}

/// The README's fleet recipe is this file's code between its markers, word for word.
#[test]
fn the_readme_fleet_recipe_is_this_program() {
    let this = include_str!("fleet_recipe.rs");
    let begin = this.find("// README:begin\n").expect("begin marker") + "// README:begin\n".len();
    let end = this.find("// README:end").expect("end marker");
    let program = &this[begin..end];
    let readme = include_str!("../../../README.md");
    assert!(
        readme.contains(program),
        "README.md's fleet recipe must be, verbatim, the code between the README markers of \
         crates/feature-tests/tests/fleet_recipe.rs:\n{program}"
    );
}

/// The README's sizing note says the recipe's `"maxEjectionPercent": 34` caps the ejected share at one
/// backend of three ("34 % of 3 is one backend"). A user reading it expects that, whatever happens, at least
/// two of three backends stay in service. The limit is checked before each ejection
/// (crates/lb/src/outlier_detection/algorithms.rs `may_eject`: `ejected × 100 < max × total`), so with one
/// of three out (33 %) a second ejection still passes 34 % and two of three go: README.md's "A fleet client"
/// bullet on `maxEjectionPercent` is wrong (a cap of one in three needs a value of 33 or less).
#[tokio::test(start_paused = true)]
async fn the_recipes_max_ejection_percent_keeps_at_most_one_backend_of_three_out() {
    guarded("two failing backends of three", two_failing_of_three()).await;
}

async fn two_failing_of_three() {
    let any = "127.0.0.1:0".parse().expect("addr");
    let healthy = server::start(any).await.expect("healthy server");
    let failing = || {
        server::start_with(
            any,
            ServerOptions::new().fail_unary_calls(Status::unavailable("sick")),
        )
    };
    let failing_a = failing().await.expect("failing server");
    let failing_b = failing().await.expect("failing server");
    let target = format!(
        "ipv4:{},{},{}",
        healthy.addr, failing_a.addr, failing_b.addr
    );
    let channel = fleet_channel(&target).expect("the recipe builds");
    channel.ready().await.expect("a backend is ready");
    let mut client = TestServiceClient::new(channel.clone());
    // Enough calls for every backend to pass requestVolume (10) in the first interval; some calls may fail
    // once the throttle stops retries, which is not what this test is about.
    for _ in 0..90 {
        let _ = client.unary_call(SimpleRequest::default()).await;
    }
    settle(Duration::from_secs(11)).await;
    let ejected = channel.stats().ejected_addresses;
    assert!(
        ejected.len() <= 1,
        "the README says maxEjectionPercent 34 keeps at most one of three backends out; ejected: {ejected:?}"
    );
    channel.close();
}
