//! Cluster kinds' edges end to end: outlier detection (A50's xDS mapping) of aggregate clusters (A37/A75)
//! and of clusters sharing an address (each leaf cluster's own `outlier_detection` governs that leaf's
//! endpoints, and a cluster without one ejects nothing, whatever another cluster does); a LOGICAL_DNS
//! cluster's addresses as one endpoint (A61).
//!
//! Every test is bounded (`support::xds::BOUND` around it); waits for a condition are bounded polling loops.

#![cfg(feature = "xds")]

use grpc_test_support as support;

use std::time::Duration;

use grpc_channel::{Channel, ResolverOptions};
use interop::faulty::FaultyServer;
use interop::xds_resources::{
    aggregate_cluster, assignment, eds_cluster, named, route_to_cluster, type_url,
    with_failure_percentage_ejection, RouteMatchSpec,
};
use interop::xds_server::ManagementServer;
use support::xds::tally;
use support::xds::{
    bounded, locality, management_server, publish, unary_served_by, xds_channel, CALL,
};
use support::{interop_server_handle, reserved_port, served_by};

/// Every call to the aggregate `agg` of the EDS clusters `a` (`a_endpoints`) then `b` (`b_endpoints`).
fn publish_aggregate(
    server: &ManagementServer,
    a: envoy_types::pb::envoy::config::cluster::v3::Cluster,
    a_endpoints: &[std::net::SocketAddr],
    b: envoy_types::pb::envoy::config::cluster::v3::Cluster,
    b_endpoints: &[std::net::SocketAddr],
) {
    publish(
        server,
        &["*"],
        vec![route_to_cluster(&RouteMatchSpec::any(), "agg")],
        &[],
    );
    server.set(
        type_url::CLUSTER,
        vec![
            named(
                "agg",
                type_url::CLUSTER,
                &aggregate_cluster("agg", &["a", "b"]),
            ),
            named("a", type_url::CLUSTER, &a),
            named("b", type_url::CLUSTER, &b),
        ],
    );
    server.set(
        type_url::ENDPOINTS,
        vec![
            named(
                "a",
                type_url::ENDPOINTS,
                &assignment("a", &locality(a_endpoints)),
            ),
            named(
                "b",
                type_url::ENDPOINTS,
                &assignment("b", &locality(b_endpoints)),
            ),
        ],
    );
}

/// Every call with `x-cluster: <other>` to the EDS cluster `other` of `shared` alone (no
/// outlier_detection), the rest to "od" of `good` and `shared`, with a failure-percentage ejection.
fn publish_od_and(
    server: &ManagementServer,
    other: &str,
    good: std::net::SocketAddr,
    shared: std::net::SocketAddr,
) {
    publish(
        server,
        &["*"],
        vec![
            route_to_cluster(&RouteMatchSpec::any().header("x-cluster", other), other),
            route_to_cluster(&RouteMatchSpec::any(), "od"),
        ],
        &[
            ("od", locality(&[good, shared])),
            (other, locality(&[shared])),
        ],
    );
    server.set(
        type_url::CLUSTER,
        vec![
            named(
                "od",
                type_url::CLUSTER,
                &with_failure_percentage_ejection(eds_cluster("od"), 100, 50, 2, 4),
            ),
            named(other, type_url::CLUSTER, &eds_cluster(other)),
        ],
    );
}

// A75 (and grpc-go's clusterresolver, C-core's xds_cluster_impl per leaf): an aggregate is a priority
// policy over its leaves, each leaf under its own Cluster's config, outlier detection included
// (`DiscoveryMechanism.OutlierDetection` per leaf in grpc-go). Leaf "a" (no outlier_detection) is
// unreachable, so calls fail over to leaf "b", whose own outlier_detection must eject its failing
// endpoint.
#[tokio::test]
async fn an_aggregates_leaf_ejects_its_failing_endpoint_by_its_own_outlier_detection() {
    bounded("a leaf's own outlier detection in an aggregate", async {
        let good = interop_server_handle().await;
        let bad = FaultyServer::start().await.expect("faulty server");
        let (_reserved, unreachable) = reserved_port();
        let server = management_server().await;
        let b = with_failure_percentage_ejection(eds_cluster("b"), 100, 50, 2, 4);
        publish_aggregate(
            &server,
            eds_cluster("a"),
            &[unreachable],
            b,
            &[good.addr, bad.addr],
        );
        let channel = xds_channel(&server);
        let bad_addr = bad.addr.to_string();
        let (mut served_good, mut ejected) = (0, false);
        for _ in 0..400 {
            if served_by(&channel, CALL).await.ok() == Some(good.addr.to_string()) {
                served_good += 1;
            }
            if channel.stats().ejected_addresses.contains(&bad_addr) {
                ejected = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(served_good > 0, "the calls never failed over to leaf \"b\"");
        assert!(
            ejected,
            "leaf \"b\"'s outlier_detection never ejected its failing endpoint ({served_good} calls served by the good one)"
        );
    })
    .await;
}

// The other way round: leaf "a" has an outlier_detection but is unreachable; leaf "b", which takes the
// calls, has none, so (A50's xDS mapping: no outlier_detection is a no-op config; A75: per-leaf configs)
// nothing of "b" may be ejected, however often its endpoint fails.
#[tokio::test]
async fn an_aggregates_leaf_without_outlier_detection_ejects_nothing_under_another_leafs() {
    bounded(
        "no outlier detection on the leaf that takes the calls",
        async {
            let good = interop_server_handle().await;
            let bad = FaultyServer::start().await.expect("faulty server");
            let (_reserved, unreachable) = reserved_port();
            let server = management_server().await;
            let a = with_failure_percentage_ejection(eds_cluster("a"), 100, 50, 2, 4);
            publish_aggregate(
                &server,
                a,
                &[unreachable],
                eds_cluster("b"),
                &[good.addr, bad.addr],
            );
            let channel = xds_channel(&server);
            // Until the calls reach "b".
            let mut reached = false;
            for _ in 0..400 {
                if served_by(&channel, CALL).await.is_ok() {
                    reached = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(reached, "the calls never failed over to leaf \"b\"");
            // Several 100 ms intervals of calls, half of them failing on "b"'s bad endpoint.
            for _ in 0..100 {
                let _ = served_by(&channel, CALL).await;
                assert!(
                    channel.stats().ejected_addresses.is_empty(),
                    "leaf \"b\" has no outlier_detection, yet {:?} was ejected",
                    channel.stats().ejected_addresses
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        },
    )
    .await;
}

// Two clusters share the endpoint `bad`: "od" (with an outlier_detection, endpoints good and bad) takes
// every call, "plain" (none, endpoint bad alone) the calls with `x-cluster: plain`. A cluster without an
// outlier_detection ejects nothing (A50's xDS mapping; grpc-go and C-core run one outlier_detection policy
// per cluster, over that cluster's own subchannels), so once "od" ejects `bad`, "plain"'s calls must still
// reach it (and get its answer: UNIMPLEMENTED), not fail UNAVAILABLE for want of an endpoint.
#[tokio::test]
async fn a_cluster_without_outlier_detection_still_calls_an_address_another_cluster_ejected() {
    bounded("an ejection stays in its cluster", async {
        let good = interop_server_handle().await;
        let bad = FaultyServer::start().await.expect("faulty server");
        let server = management_server().await;
        publish_od_and(&server, "plain", good.addr, bad.addr);
        let channel = xds_channel(&server);
        // "plain" reaches `bad` before any ejection.
        let before = unary_served_by(&channel, &[("x-cluster", "plain")])
            .await
            .expect_err("the faulty server fails UnaryCall");
        assert_eq!(before.code(), grpc_channel::Code::Unimplemented, "{before:?}");
        let bad_addr = bad.addr.to_string();
        let mut ejected = false;
        for _ in 0..400 {
            let _ = served_by(&channel, CALL).await;
            if channel.stats().ejected_addresses.contains(&bad_addr) {
                ejected = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(ejected, "cluster \"od\" never ejected its failing endpoint");
        let after = unary_served_by(&channel, &[("x-cluster", "plain")])
            .await
            .expect_err("the faulty server fails UnaryCall");
        assert_eq!(
            after.code(),
            grpc_channel::Code::Unimplemented,
            "cluster \"plain\" (no outlier_detection) lost its endpoint to \"od\"'s ejection: {after:?}"
        );
    })
    .await;
}

// A37 (LOGICAL_DNS: a pick_first child) and A61 (every address DNS gives is one endpoint of several
// addresses, under the cluster's policy): round_robin over that one endpoint sends every call to one
// address (the first that connects), as pick_first does; grpc-go's clusterresolver
// (`buildClusterImplConfigForDNS`: "LOGICAL_DNS requires all resolved addresses to be grouped into a
// single logical endpoint"; before A61, a hard-coded pick_first) does the same.
#[tokio::test]
async fn a_logical_dns_clusters_addresses_are_one_endpoint_so_its_calls_stay_on_one_backend() {
    bounded("LOGICAL_DNS addresses as one endpoint", async {
        let (first, second) = support::xds::backends_on_one_port().await;
        let dns = interop::dns::TestDns::start().await.expect("dns");
        dns.add_a("backend.test", std::net::Ipv4Addr::LOCALHOST)
            .await;
        dns.add_a("backend.test", std::net::Ipv4Addr::new(127, 0, 0, 2))
            .await;
        let server = management_server().await;
        support::xds::publish_logical_dns(&server, "backend.test", first.addr.port());
        let channel = support::xds::xds_channel_resolving(
            &server,
            ResolverOptions::default().with_default_server(Some(dns.addr)),
        );
        // Both backends up and connectable: one endpoint means one of them takes every call.
        let counts = tally(&channel, 20).await;
        assert_eq!(
            counts.len(),
            1,
            "the LOGICAL_DNS cluster's calls were spread over its addresses ({counts:?}; second backend {})",
            second.addr
        );
    })
    .await;
}

// A75 / grpc-go's clusterresolver: an aggregate is a priority policy over its leaves, each leaf's
// priorities under that leaf's own cluster_impl (its EDS drop_overloads, its circuit breaker). Leaf "a"
// drops every call (EDS drop_overloads 100 %) but its only endpoint is unreachable, so the aggregate fails
// over to leaf "b" (no drops), whose calls must succeed.
#[tokio::test]
async fn an_aggregates_first_leafs_drops_do_not_drop_the_calls_another_leaf_serves() {
    use envoy_types::pb::envoy::config::endpoint::v3::cluster_load_assignment::policy::DropOverload;
    use envoy_types::pb::envoy::config::endpoint::v3::cluster_load_assignment::Policy;
    use envoy_types::pb::envoy::r#type::v3::fractional_percent::DenominatorType;
    use envoy_types::pb::envoy::r#type::v3::FractionalPercent;

    bounded("a leaf's drops stay in the leaf", async {
        let good = interop_server_handle().await;
        let (_reserved, unreachable) = reserved_port();
        let server = management_server().await;
        publish_aggregate(
            &server,
            eds_cluster("a"),
            &[unreachable],
            eds_cluster("b"),
            &[good.addr],
        );
        let mut dropping = assignment("a", &locality(&[unreachable]));
        dropping.policy = Some(Policy {
            drop_overloads: vec![DropOverload {
                category: "everything".to_owned(),
                drop_percentage: Some(FractionalPercent {
                    numerator: 100,
                    denominator: DenominatorType::Hundred as i32,
                }),
            }],
            ..Default::default()
        });
        server.set(
            type_url::ENDPOINTS,
            vec![
                named("a", type_url::ENDPOINTS, &dropping),
                named(
                    "b",
                    type_url::ENDPOINTS,
                    &assignment("b", &locality(&[good.addr])),
                ),
            ],
        );
        let channel = xds_channel(&server);
        let mut last = None;
        for _ in 0..300 {
            match served_by(&channel, CALL).await {
                Ok(id) => {
                    last = Some(Ok(id));
                    break;
                }
                Err(status) => last = Some(Err(status.to_string())),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(last, Some(Ok(good.addr.to_string())));
    })
    .await;
}

/// A `UnaryCall` with these metadata entries, which the (interop) backend answers with status `code`
/// (0: OK, naming itself).
async fn unary_answering(
    channel: &Channel,
    metadata: &[(&str, &str)],
    code: i32,
) -> Result<String, grpc_channel::Status> {
    let request = interop_proto::SimpleRequest {
        fill_server_id: true,
        response_status: (code != 0).then(|| interop_proto::EchoStatus {
            code,
            message: "told to fail".into(),
        }),
        ..interop_proto::SimpleRequest::default()
    };
    let call = channel.unary::<_, interop_proto::SimpleResponse>(
        interop_proto::paths::UNARY_CALL,
        support::with_metadata(grpc_channel::Request::new(request), metadata),
    );
    tokio::time::timeout(CALL, call)
        .await
        .expect("the call ends by itself")
        .map(|r| r.into_inner().server_id)
}

// A50 per cluster (grpc-go, C-core: one outlier_detection policy per cluster, counting the calls *that
// cluster* sends through its own subchannels): cluster "od" (outlier_detection; endpoints good and
// shared) sees only successes, so it ejects nothing, however many of cluster "other"'s calls (no
// outlier_detection; endpoint shared; every call told to fail) fail on the shared backend.
#[tokio::test]
async fn a_clusters_outlier_detection_counts_only_the_calls_of_that_cluster() {
    bounded("another cluster's failures are not this cluster's", async {
        let good = interop_server_handle().await;
        let shared = interop_server_handle().await;
        let server = management_server().await;
        publish_od_and(&server, "other", good.addr, shared.addr);
        let channel = xds_channel(&server);
        // Both clusters serve.
        let first = unary_answering(&channel, &[], 0).await;
        assert!(first.is_ok(), "{first:?}");
        // Several 100 ms intervals: every "od" call succeeds, every "other" call fails (INTERNAL).
        for i in 0..100 {
            let failed = unary_answering(&channel, &[("x-cluster", "other")], 13).await;
            assert!(failed.is_err(), "call {i} to \"other\" was told to fail");
            let od = unary_answering(&channel, &[], 0).await;
            assert!(od.is_ok(), "call {i} to \"od\" failed: {od:?}");
            assert!(
                channel.stats().ejected_addresses.is_empty(),
                "\"od\" saw no failure, yet ejected {:?} (after {i} rounds)",
                channel.stats().ejected_addresses
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}
