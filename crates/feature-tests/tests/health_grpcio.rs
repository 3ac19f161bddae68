//! Client-side health checking (gRFC A17) against Python grpcio (C-core) servers, an independent
//! implementation: the backends serve grpcio-health-checking's `grpc.health.v1.Health` servicer, and the
//! test sets their statuses at run time (`support::grpcio`'s `set_health`).
//!
//! With `"healthCheckConfig":{"serviceName":"svc"}` under round_robin the channel watches every READY
//! connection with `/grpc.health.v1.Health/Watch`: a backend is picked only while its status is SERVING
//! (NOT_SERVING and SERVICE_UNKNOWN take it out of rotation, SERVING again puts it back), and a server
//! without the health service (`Watch` UNIMPLEMENTED) counts as healthy; `ChannelBuilder::health_checks(false)`
//! turns it all off. A first test checks the peer on its own: `Check` and `Watch` answer what the test set,
//! through the channel's generated `HealthClient`.
//!
//! The servers are separate processes, so the tests run on real time; nothing sleeps as an assertion:
//! every wait polls for its condition within a bound. Which backend served a `UnaryCall` comes from the
//! grpcio server's `x-server-port` trailer, which it adds when asked with `x-test-server-port: 1`.
//!
//! Needs the grpcio virtualenv (see `support::grpcio`); without it each test says so and passes, like
//! compression_grpcio.rs, unless `GRPCIO_PEER_REQUIRED` is set.

use grpc_test_support as support;

use std::collections::HashSet;
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use grpc_channel::{Channel, Code, Request, Status, Streaming};
use interop_proto::grpc_health_v1::health_check_response::ServingStatus;
use interop_proto::grpc_health_v1::health_client::HealthClient;
use interop_proto::grpc_health_v1::{HealthCheckRequest, HealthCheckResponse};
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use support::grpcio::{Grpcio, GrpcioOptions};
use support::guards::NO_HANG;

/// round_robin, each backend's health watched for the service `svc`.
const HEALTH_RR: &str =
    r#"{"healthCheckConfig":{"serviceName":"svc"},"loadBalancingConfig":[{"round_robin":{}}]}"#;

/// How long a test waits for the channel to act on a health change (real time: a bound, not a
/// measurement).
const SETTLE: Duration = Duration::from_secs(10);

/// Consecutive calls that must all miss a backend taken out of rotation.
const CALLS: usize = 60;

/// Starts `n` grpcio servers with these options; `None` when there is no grpcio (the test then passes).
fn servers(n: usize, options: GrpcioOptions) -> Option<Vec<Grpcio>> {
    (0..n)
        .map(|_| support::grpcio::start_with(options.clone()))
        .collect()
}

/// A channel to every address, with `config` as its service config (no DNS TXT lookups).
fn channel(addrs: &[SocketAddr], config: &str) -> Channel {
    let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    Channel::builder(format!("ipv4:{}", list.join(",")))
        .default_service_config(config)
        .service_config_lookup(false)
        .build()
        .expect("channel")
}

async fn no_hang<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(NO_HANG, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {NO_HANG:?}"))
}

/// One `UnaryCall`; the port of the backend that served it.
async fn served_by(ch: &Channel) -> u16 {
    let mut request = Request::new(SimpleRequest::default());
    request
        .metadata_mut()
        .append("x-test-server-port", "1")
        .expect("metadata");
    let response = no_hang(
        "UnaryCall",
        ch.unary::<_, SimpleResponse>(paths::UNARY_CALL, request),
    )
    .await
    .unwrap_or_else(|s| panic!("UnaryCall: {s:?}"));
    let port = response
        .trailers()
        .get("x-server-port")
        .unwrap_or_else(|| panic!("no x-server-port trailer: {:?}", response.trailers()));
    port.parse().expect("a port")
}

/// Calls until every port in `wanted` has served one, within [`SETTLE`]; the ports that served.
async fn until_all_served(ch: &Channel, wanted: &[u16]) -> HashSet<u16> {
    let deadline = Instant::now() + SETTLE;
    let mut seen = HashSet::new();
    while !wanted.iter().all(|p| seen.contains(p)) {
        assert!(
            Instant::now() < deadline,
            "within {SETTLE:?} only {seen:?} of {wanted:?} served calls"
        );
        seen.insert(served_by(ch).await);
    }
    seen
}

/// Calls until [`CALLS`] in a row missed `avoided`, within [`SETTLE`]; the ports that served those calls.
async fn until_avoided(ch: &Channel, avoided: u16) -> HashSet<u16> {
    let deadline = Instant::now() + SETTLE;
    let mut run = HashSet::new();
    let mut in_a_row = 0;
    while in_a_row < CALLS {
        assert!(
            Instant::now() < deadline,
            "after {SETTLE:?} calls still reach port {avoided}"
        );
        let port = served_by(ch).await;
        if port == avoided {
            in_a_row = 0;
            run.clear();
            // Give the channel a moment to see the new status before calling again.
            tokio::time::sleep(Duration::from_millis(20)).await;
        } else {
            in_a_row += 1;
            run.insert(port);
        }
    }
    run
}

/// Polls (every 20 ms, within [`SETTLE`]) until the channel lists exactly `expected` as READY but not
/// serving.
async fn until_not_serving(ch: &Channel, expected: &[SocketAddr]) {
    let expected: Vec<String> = expected.iter().map(ToString::to_string).collect();
    let deadline = Instant::now() + SETTLE;
    while ch.stats().not_serving_addresses != expected {
        assert!(
            Instant::now() < deadline,
            "after {SETTLE:?} not serving: {:?}, expected {expected:?}",
            ch.stats().not_serving_addresses
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn health_request(service: &str) -> HealthCheckRequest {
    HealthCheckRequest {
        service: service.to_owned(),
    }
}

async fn check(client: &mut HealthClient, service: &str) -> Result<ServingStatus, Status> {
    let response = no_hang("Check", client.check(health_request(service)))
        .await?
        .into_inner();
    Ok(status_of(&response))
}

fn status_of(response: &HealthCheckResponse) -> ServingStatus {
    ServingStatus::try_from(response.status).expect("a known status")
}

async fn next(updates: &mut Streaming<HealthCheckResponse>) -> ServingStatus {
    let response = no_hang("Watch", updates.message())
        .await
        .expect("a status")
        .expect("the watch stays open");
    status_of(&response)
}

/// The peer on its own, no health checking in the channel: grpcio's `Check` and `Watch` answer what the
/// test sets through `set_health`, `UnaryCall` names its port when asked, and a server started without
/// the health service answers UNIMPLEMENTED.
#[tokio::test]
async fn the_grpcio_peer_serves_the_statuses_the_test_sets() {
    let Some(mut server) = support::grpcio::start() else {
        return;
    };
    let channel = Channel::new(format!("ipv4:{}", server.addr)).expect("channel");
    let mut client = HealthClient::new(channel.clone());

    assert_eq!(
        check(&mut client, "").await.expect("Check"),
        ServingStatus::Serving
    );
    // A name the server never heard of: Check answers NOT_FOUND (the health spec), Watch SERVICE_UNKNOWN.
    let status = check(&mut client, "svc").await.expect_err("unknown");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    let mut updates = no_hang("Watch", client.watch(health_request("svc")))
        .await
        .expect("Watch")
        .into_inner();
    assert_eq!(next(&mut updates).await, ServingStatus::ServiceUnknown);

    server.set_health("svc", "SERVING");
    assert_eq!(next(&mut updates).await, ServingStatus::Serving);
    assert_eq!(
        check(&mut client, "svc").await.expect("Check"),
        ServingStatus::Serving
    );
    server.set_health("svc", "NOT_SERVING");
    assert_eq!(next(&mut updates).await, ServingStatus::NotServing);
    assert_eq!(
        check(&mut client, "svc").await.expect("Check"),
        ServingStatus::NotServing
    );
    server.set_health("svc", "SERVICE_UNKNOWN");
    assert_eq!(next(&mut updates).await, ServingStatus::ServiceUnknown);
    // The whole server, written "" (the command's `-`).
    server.set_health("", "NOT_SERVING");
    assert_eq!(
        check(&mut client, "").await.expect("Check"),
        ServingStatus::NotServing
    );

    // UnaryCall names the port only when asked.
    assert_eq!(served_by(&channel).await, server.addr.port());
    let plain = no_hang(
        "UnaryCall",
        channel
            .unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(SimpleRequest::default())),
    )
    .await
    .expect("UnaryCall");
    assert_eq!(plain.trailers().get("x-server-port"), None);

    let Some(bare) = support::grpcio::start_with(GrpcioOptions { health: false }) else {
        return;
    };
    let mut client =
        HealthClient::new(Channel::new(format!("ipv4:{}", bare.addr)).expect("channel"));
    let status = check(&mut client, "").await.expect_err("no health service");
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    let status = no_hang("Watch", client.watch(health_request("svc")))
        .await
        .expect_err("no health service");
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
}

/// Three backends SERVING `svc`: calls spread across all three. One turned NOT_SERVING stops getting calls
/// (its connection stays up); SERVING again, it gets calls again.
#[tokio::test]
async fn a_backend_not_serving_leaves_the_rotation_and_comes_back() {
    let Some(mut backends) = servers(3, GrpcioOptions::default()) else {
        return;
    };
    for backend in &mut backends {
        backend.set_health("svc", "SERVING");
    }
    let addrs: Vec<SocketAddr> = backends.iter().map(|b| b.addr).collect();
    let ports: Vec<u16> = addrs.iter().map(SocketAddr::port).collect();
    let ch = channel(&addrs, HEALTH_RR);

    until_all_served(&ch, &ports).await;

    let b = ports[1];
    backends[1].set_health("svc", "NOT_SERVING");
    let run = until_avoided(&ch, b).await;
    let others: HashSet<u16> = [ports[0], ports[2]].into();
    assert_eq!(
        run, others,
        "the other two share the calls while {b} is NOT_SERVING"
    );
    // Its connection stays READY, listed as not serving.
    until_not_serving(&ch, &[addrs[1]]).await;

    backends[1].set_health("svc", "SERVING");
    until_all_served(&ch, &[b]).await;
    until_not_serving(&ch, &[]).await;
    drop(backends);
}

/// A backend without the health service (its `Watch` answers UNIMPLEMENTED) counts as healthy: it stays in
/// rotation with a backend that is SERVING.
#[tokio::test]
async fn a_backend_without_the_health_service_stays_in_rotation() {
    let Some(bare) = support::grpcio::start_with(GrpcioOptions { health: false }) else {
        return;
    };
    let Some(mut healthy) = support::grpcio::start() else {
        return;
    };
    healthy.set_health("svc", "SERVING");
    let ch = channel(&[bare.addr, healthy.addr], HEALTH_RR);

    let both = [bare.addr.port(), healthy.addr.port()];
    until_all_served(&ch, &both).await;
    // And keeps serving: the next calls still reach both.
    let mut seen = HashSet::new();
    for _ in 0..CALLS {
        seen.insert(served_by(&ch).await);
    }
    assert_eq!(seen, HashSet::from(both));
    assert!(ch.stats().not_serving_addresses.is_empty());
}

/// A backend that never heard of `svc` (its `Watch` answers SERVICE_UNKNOWN) gets no call at all; the one
/// SERVING `svc` gets them all.
#[tokio::test]
async fn a_backend_that_does_not_know_the_service_gets_no_calls() {
    let Some(unknown) = support::grpcio::start() else {
        return;
    };
    let Some(mut serving) = support::grpcio::start() else {
        return;
    };
    serving.set_health("svc", "SERVING");
    let ch = channel(&[unknown.addr, serving.addr], HEALTH_RR);

    for _ in 0..CALLS {
        assert_eq!(
            served_by(&ch).await,
            serving.addr.port(),
            "port {} does not know svc",
            unknown.addr.port()
        );
    }
    until_not_serving(&ch, &[unknown.addr]).await;
}

/// The application's veto (`ChannelBuilder::health_checks(false)`) wins over the service config: a backend
/// NOT_SERVING `svc` still gets calls.
#[tokio::test]
async fn health_checks_turned_off_use_a_backend_not_serving() {
    let Some(mut not_serving) = support::grpcio::start() else {
        return;
    };
    let Some(mut serving) = support::grpcio::start() else {
        return;
    };
    not_serving.set_health("svc", "NOT_SERVING");
    serving.set_health("svc", "SERVING");
    let ch = Channel::builder(format!("ipv4:{},{}", not_serving.addr, serving.addr))
        .default_service_config(HEALTH_RR)
        .service_config_lookup(false)
        .health_checks(false)
        .build()
        .expect("channel");

    until_all_served(&ch, &[not_serving.addr.port(), serving.addr.port()]).await;
    assert!(ch.stats().not_serving_addresses.is_empty());
}
