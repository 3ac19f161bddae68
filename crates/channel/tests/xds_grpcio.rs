//! The test management server (`interop::xds_server`) and the scenarios of `xds_end_to_end.rs` driving an
//! independent xDS client: Python grpcio (C-core), `interop/peers/grpcio/xds_client.py`, with its bootstrap
//! in a file named by `GRPC_XDS_BOOTSTRAP`. The resources our channel is tested with are thereby proven to be
//! what a real xDS client accepts (and ACKs), and the scenarios to behave alike: an RDS route to an EDS
//! cluster of two endpoints, weighted clusters, header routes, a route's retry policy (A44), an EDS update
//! while calls run, priority failover, a NACKed Listener and a NACKed route (an unknown required filter)
//! that keep the last good config, and the management server restarting.
//!
//! The backends are our interop servers (and the fault-injecting server for the retry policy) in this
//! process; the grpcio client is a child process. It is on real time: every wait is bounded, and nothing
//! sleeps as an assertion.
//!
//! Needs the grpcio virtualenv (`interop::grpcio_peer`); without it each test says so and passes, unless
//! `GRPCIO_PEER_REQUIRED` is set (CI sets it after `cargo xtask interop --peer grpcio` made it).

#![cfg(feature = "xds")]

use grpc_test_support as support;

use std::time::Duration;

use interop::faulty::{methods, FaultyServer};
use interop::xds_resources::{
    route_to_cluster, route_to_weighted, type_url, with_retry_policy, LocalitySpec, RouteMatchSpec,
};
use interop::xds_server::ManagementServer;
use support::flaky::attempts;
use support::grpcio_xds::{grpcio_xds_client, GrpcioXds};
use support::xds::{
    bounded, locality, management_server, nack_of, publish, set_endpoints,
    set_listener_without_api_listener, set_routes_with_unknown_filter, NAME,
};
use support::{interop_server_handle, reserved_port};

/// Starts the grpcio client with a bootstrap naming `server`; `None` when there is no grpcio (the test
/// then passes).
fn grpcio_client(server: &ManagementServer, test: &str) -> Option<GrpcioXds> {
    grpcio_xds_client(&server.bootstrap_json(), test, &[])
}

/// Waits (at most 10 s) for the grpcio client to ACK every type: a request naming a version, without error.
async fn acked_every_type(server: &ManagementServer) {
    support::grpcio_xds::assert_acked(
        server,
        &[
            type_url::LISTENER,
            type_url::ROUTE,
            type_url::CLUSTER,
            type_url::ENDPOINTS,
        ],
    )
    .await;
}

/// Listener → RDS route → EDS cluster of two endpoints: grpcio ACKs every resource, every call succeeds,
/// and round robin reaches both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_reaches_both_endpoints_of_an_rds_route() {
    let a = interop_server_handle().await;
    let b = interop_server_handle().await;
    let server = management_server().await;
    publish(
        &server,
        &[NAME],
        vec![route_to_cluster(&RouteMatchSpec::any(), "cluster-ab")],
        &[("cluster-ab", locality(&[a.addr, b.addr]))],
    );
    let Some(mut client) = grpcio_client(&server, "two-endpoints") else {
        return;
    };
    let batch = client.unary(40, &[]).await;
    assert_eq!(batch.ok(), 40, "{batch:?}");
    assert!(
        batch.served_by(a.addr) > 0 && batch.served_by(b.addr) > 0,
        "round robin reaches both backends: {batch:?}"
    );
    bounded("ACKs", acked_every_type(&server)).await;
}

/// Weighted clusters 80/20: over 300 calls the first cluster's share is within 0.70–0.90.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_splits_calls_over_weighted_clusters() {
    let a = interop_server_handle().await;
    let b = interop_server_handle().await;
    let server = management_server().await;
    publish(
        &server,
        &["*"],
        vec![route_to_weighted(
            &RouteMatchSpec::any(),
            &[("heavy", 80), ("light", 20)],
        )],
        &[
            ("heavy", locality(&[a.addr])),
            ("light", locality(&[b.addr])),
        ],
    );
    let Some(mut client) = grpcio_client(&server, "weighted") else {
        return;
    };
    let batch = client.unary(300, &[]).await;
    assert_eq!(batch.ok(), 300, "{batch:?}");
    let share = batch.served_by(a.addr) as f64 / 300.0;
    assert!(
        (0.70..=0.90).contains(&share),
        "the 80 % cluster took {share:.2} of the calls: {batch:?}"
    );
}

/// A header route: calls with `x-variant: canary` go to their own cluster, the others to the default route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_follows_a_header_route() {
    let stable = interop_server_handle().await;
    let canary = interop_server_handle().await;
    let server = management_server().await;
    publish(
        &server,
        &["*"],
        vec![
            route_to_cluster(
                &RouteMatchSpec::any().header("x-variant", "canary"),
                "canary",
            ),
            route_to_cluster(&RouteMatchSpec::any(), "stable"),
        ],
        &[
            ("stable", locality(&[stable.addr])),
            ("canary", locality(&[canary.addr])),
        ],
    );
    let Some(mut client) = grpcio_client(&server, "header-route") else {
        return;
    };
    let plain = client.unary(10, &[]).await;
    assert_eq!(plain.served_by(stable.addr), 10, "{plain:?}");
    let marked = client.unary(10, &[("x-variant", "canary")]).await;
    assert_eq!(marked.served_by(canary.addr), 10, "{marked:?}");
}

/// A route's retry policy (A44: `retry_on: unavailable`, `num_retries: 2`) against a backend that fails
/// UNAVAILABLE twice: grpcio makes three attempts, each naming the attempts before it, and the call
/// succeeds; with five failures it gives up after three attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_retries_by_the_route_retry_policy() {
    let backend = FaultyServer::start().await.expect("faulty server");
    let server = management_server().await;
    publish(
        &server,
        &["*"],
        vec![with_retry_policy(
            route_to_cluster(&RouteMatchSpec::any(), "flaky"),
            "unavailable",
            2,
        )],
        &[("flaky", locality(&[backend.addr]))],
    );
    let Some(mut client) = grpcio_client(&server, "retry-policy") else {
        return;
    };
    let ok = client
        .batch(
            methods::FLAKY,
            1,
            &[("x-test-key", "grpcio-retry"), ("x-fail-times", "2")],
        )
        .await;
    assert_eq!(ok.ok(), 1, "the third attempt succeeds: {ok:?}");
    assert_eq!(
        attempts(&[&backend], "grpcio-retry"),
        vec![
            (1, None),
            (2, Some("1".to_owned())),
            (3, Some("2".to_owned()))
        ],
        "three attempts on the backend, each naming the attempts before it"
    );
    let failed = client
        .batch(
            methods::FLAKY,
            1,
            &[("x-test-key", "grpcio-exhausted"), ("x-fail-times", "5")],
        )
        .await;
    assert_eq!(
        failed.codes.get("UNAVAILABLE").copied(),
        Some(1),
        "{failed:?}"
    );
    assert_eq!(failed.details.len(), 1, "the failure's message: {failed:?}");
    assert_eq!(attempts(&[&backend], "grpcio-exhausted").len(), 3);
}

/// An EDS update while calls run: a new endpoint replaces the old one; no call fails, calls reach the new
/// endpoint within 50 batches of 10, and once a whole batch has, none goes back to the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_follows_an_eds_update_without_failed_calls() {
    let old = interop_server_handle().await;
    let new = interop_server_handle().await;
    let server = management_server().await;
    publish(
        &server,
        &["*"],
        vec![route_to_cluster(&RouteMatchSpec::any(), "moving")],
        &[("moving", locality(&[old.addr]))],
    );
    let Some(mut client) = grpcio_client(&server, "eds-update") else {
        return;
    };
    let before = client.unary(10, &[]).await;
    assert_eq!(before.served_by(old.addr), 10, "{before:?}");
    set_endpoints(&server, &[("moving", locality(&[new.addr]))]);
    let mut moved = false;
    for _ in 0..50 {
        let batch = client.unary(10, &[]).await;
        assert_eq!(batch.ok(), 10, "no call fails during the update: {batch:?}");
        if batch.served_by(new.addr) == 10 {
            moved = true;
            break;
        }
    }
    assert!(moved, "grpcio never moved every call to the new endpoint");
    let after = client.unary(20, &[]).await;
    assert_eq!(after.served_by(new.addr), 20, "{after:?}");
}

/// A Listener without `api_listener` after a good config: grpcio NACKs it (a request with `error_detail`,
/// naming the last good version) and its calls go on under the previous config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_nacks_a_listener_without_api_listener_and_keeps_its_config() {
    let a = interop_server_handle().await;
    let server = management_server().await;
    publish(
        &server,
        &["*"],
        vec![route_to_cluster(&RouteMatchSpec::any(), "good")],
        &[("good", locality(&[a.addr]))],
    );
    let Some(mut client) = grpcio_client(&server, "nack") else {
        return;
    };
    let before = client.unary(5, &[]).await;
    assert_eq!(before.served_by(a.addr), 5, "{before:?}");
    set_listener_without_api_listener(&server);
    let nack = nack_of(&server, type_url::LISTENER, "grpcio").await;
    assert_eq!(
        nack.version_info, "1",
        "the NACK names the last good version: {nack:?}"
    );
    let after = client.unary(10, &[]).await;
    assert_eq!(after.served_by(a.addr), 10, "{after:?}");
}

/// A route with an unknown, non-optional filter override after a good config: grpcio NACKs the
/// RouteConfiguration and its calls stay on the first cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_nacks_a_route_with_an_unknown_required_filter() {
    let a = interop_server_handle().await;
    let b = interop_server_handle().await;
    let server = management_server().await;
    publish(
        &server,
        &["*"],
        vec![route_to_cluster(&RouteMatchSpec::any(), "good")],
        &[
            ("good", locality(&[a.addr])),
            ("other", locality(&[b.addr])),
        ],
    );
    let Some(mut client) = grpcio_client(&server, "filter-nack") else {
        return;
    };
    let before = client.unary(5, &[]).await;
    assert_eq!(before.served_by(a.addr), 5, "{before:?}");
    set_routes_with_unknown_filter(&server, "other");
    let nack = nack_of(&server, type_url::ROUTE, "grpcio").await;
    assert_eq!(
        nack.version_info, "1",
        "the NACK names the last good version: {nack:?}"
    );
    let after = client.unary(10, &[]).await;
    assert_eq!(after.served_by(a.addr), 10, "{after:?}");
}

/// Priority failover: the priority-0 locality's only endpoint is a port where nothing listens; priority 1
/// has a live backend. grpcio's calls succeed, on priority 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_fails_over_to_the_next_priority() {
    let (_held, dead) = reserved_port();
    let live = interop_server_handle().await;
    let server = management_server().await;
    let mut p0 = LocalitySpec::new("z-dead", &[dead]);
    p0.priority = 0;
    let mut p1 = LocalitySpec::new("z-live", &[live.addr]);
    p1.priority = 1;
    publish(
        &server,
        &["*"],
        vec![route_to_cluster(&RouteMatchSpec::any(), "prioritized")],
        &[("prioritized", vec![p0, p1])],
    );
    let Some(mut client) = grpcio_client(&server, "priority") else {
        return;
    };
    let batch = client.unary(20, &[]).await;
    assert_eq!(batch.served_by(live.addr), 20, "{batch:?}");
}

/// The management server restarts on its port: grpcio opens a new stream, subscribes again, and its calls
/// keep succeeding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_resubscribes_after_the_management_server_restarts() {
    let a = interop_server_handle().await;
    let mut server = management_server().await;
    publish(
        &server,
        &["*"],
        vec![route_to_cluster(&RouteMatchSpec::any(), "steady")],
        &[("steady", locality(&[a.addr]))],
    );
    let Some(mut client) = grpcio_client(&server, "restart") else {
        return;
    };
    let before = client.unary(5, &[]).await;
    assert_eq!(before.ok(), 5, "{before:?}");
    let seen = server.requests().len();
    server.restart().await.expect("restart on the same port");
    // grpcio reconnects with backoff (a second or so after the restart).
    let mut again = false;
    for _ in 0..1500 {
        again = server.requests()[seen..].iter().any(|r| {
            r.type_url == type_url::LISTENER && r.resource_names.iter().any(|n| n == NAME)
        });
        if again {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        again,
        "grpcio never asked for the Listener again within 30 s"
    );
    assert!(server.streams_opened() >= 2, "a second ADS stream");
    let after = client.unary(10, &[]).await;
    assert_eq!(after.served_by(a.addr), 10, "{after:?}");
}
