//! Cluster kinds and cluster-level policies end to end, through the test management server: a Cluster's
//! `outlier_detection` (A50's xDS mapping) ejects the cluster's failing endpoint (and a cluster without one
//! ejects nothing); an aggregate cluster (A37) of an EDS cluster whose endpoint is unreachable and a
//! LOGICAL_DNS cluster whose name a test DNS server answers with a live backend fails over to the latter;
//! an aggregate's leaves stay watched while it names them (and their watches go when it stops); a
//! LOGICAL_DNS name is resolved again when its backend goes and the policy asks for re-resolution.
//!
//! Every test is bounded (`support::xds::BOUND` around it); waits for a condition are bounded polling loops.

#![cfg(feature = "xds")]

use grpc_test_support as support;

use std::time::Duration;

use grpc_channel::{Channel, ResolverOptions};
use interop::faulty::FaultyServer;
use interop::xds_resources::{
    aggregate_cluster, assignment, eds_cluster, logical_dns_cluster, named, route_to_cluster,
    type_url, with_failure_percentage_ejection, RouteMatchSpec,
};
use interop::xds_server::ManagementServer;
use support::xds::{bounded, locality, management_server, publish, tally, xds_channel, CALL};
use support::{interop_server_handle, reserved_port, served_by};

/// Publishes every call to the EDS cluster `c` of `endpoints`, its Cluster `cluster`.
fn publish_cluster(
    server: &ManagementServer,
    cluster: envoy_types::pb::envoy::config::cluster::v3::Cluster,
    endpoints: &[std::net::SocketAddr],
) {
    publish(
        server,
        &["*"],
        vec![route_to_cluster(&RouteMatchSpec::any(), "c")],
        &[("c", locality(endpoints))],
    );
    server.set(
        type_url::CLUSTER,
        vec![named("c", type_url::CLUSTER, &cluster)],
    );
}

#[tokio::test]
async fn a_clusters_outlier_detection_ejects_its_failing_endpoint() {
    bounded("outlier detection from the Cluster", async {
        let good = interop_server_handle().await;
        // Not an interop server: every UnaryCall to it fails.
        let bad = FaultyServer::start().await.expect("faulty server");
        let server = management_server().await;
        // Failing more than half of 4 calls in a 100 ms interval, among 2 hosts, ejects.
        let cluster = with_failure_percentage_ejection(eds_cluster("c"), 100, 50, 2, 4);
        publish_cluster(&server, cluster, &[good.addr, bad.addr]);
        let channel = xds_channel(&server);
        let bad_addr = bad.addr.to_string();
        let mut failures = 0;
        let mut ejected = false;
        for _ in 0..500 {
            if served_by(&channel, CALL).await.is_err() {
                failures += 1;
            }
            if channel.stats().ejected_addresses.contains(&bad_addr) {
                ejected = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(ejected, "the failing endpoint was never ejected");
        assert!(failures > 0, "no call reached the failing endpoint");
        // Ejected for 30 s: every call now lands on the good backend.
        let counts = tally(&channel, 20).await;
        assert_eq!(
            counts.keys().cloned().collect::<Vec<_>>(),
            [good.addr.to_string()]
        );
    })
    .await;
}

#[tokio::test]
async fn a_cluster_without_outlier_detection_ejects_nothing() {
    bounded("no outlier detection", async {
        let good = interop_server_handle().await;
        let bad = FaultyServer::start().await.expect("faulty server");
        let server = management_server().await;
        publish_cluster(&server, eds_cluster("c"), &[good.addr, bad.addr]);
        let channel = xds_channel(&server);
        let mut failures = 0;
        for _ in 0..40 {
            if served_by(&channel, CALL).await.is_err() {
                failures += 1;
            }
        }
        // Round robin over both, nothing ejected: about half fail, to the end.
        assert!(failures >= 10, "{failures} failures in 40 calls");
        assert!(channel.stats().ejected_addresses.is_empty());
        let mut late_failures = 0;
        for _ in 0..10 {
            if served_by(&channel, CALL).await.is_err() {
                late_failures += 1;
            }
        }
        assert!(
            late_failures > 0,
            "the failing endpoint stopped taking calls"
        );
    })
    .await;
}

#[tokio::test]
async fn an_aggregate_cluster_fails_over_from_an_unreachable_eds_cluster_to_a_logical_dns_one() {
    bounded("aggregate failover", async {
        let backend = interop_server_handle().await;
        // An address nothing listens on.
        let (_reserved, unreachable) = reserved_port();
        let dns = interop::dns::TestDns::start().await.expect("dns");
        dns.add_a("backend.test", std::net::Ipv4Addr::LOCALHOST)
            .await;
        let server = management_server().await;
        publish(
            &server,
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
                    &aggregate_cluster("agg", &["eds", "dns"]),
                ),
                named("eds", type_url::CLUSTER, &eds_cluster("eds")),
                named(
                    "dns",
                    type_url::CLUSTER,
                    &logical_dns_cluster("dns", "backend.test", backend.addr.port()),
                ),
            ],
        );
        server.set(
            type_url::ENDPOINTS,
            vec![named(
                "eds",
                type_url::ENDPOINTS,
                &assignment("eds", &locality(&[unreachable])),
            )],
        );
        let channel = support::xds::xds_channel_resolving(
            &server,
            ResolverOptions::default().with_default_server(Some(dns.addr)),
        );
        let mut last = None;
        for _ in 0..500 {
            match served_by(&channel, CALL).await {
                Ok(id) => {
                    last = Some(Ok(id));
                    break;
                }
                Err(status) => last = Some(Err(status)),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            last.map(|r| r.map_err(|s| s.to_string())),
            Some(Ok(backend.addr.to_string()))
        );
        // Every call goes there now.
        let counts = tally(&channel, 10).await;
        assert_eq!(
            counts.keys().cloned().collect::<Vec<_>>(),
            [backend.addr.to_string()]
        );
    })
    .await;
}

/// The names of the resources of `kind` the channel watches now.
fn watched(channel: &Channel, kind: grpc_channel::XdsResourceType) -> Vec<String> {
    let mut names: Vec<String> = channel
        .xds_resources()
        .expect("resources")
        .resources
        .into_iter()
        .filter(|r| r.resource_type == kind)
        .map(|r| r.name)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn an_aggregates_leaves_stay_watched_while_it_names_them() {
    bounded("aggregate leaf watches", async {
        let a = interop_server_handle().await;
        let b = interop_server_handle().await;
        let server = management_server().await;
        publish(
            &server,
            &["*"],
            vec![route_to_cluster(&RouteMatchSpec::any(), "agg")],
            &[],
        );
        let clusters = |children: &[&str]| {
            vec![
                named(
                    "agg",
                    type_url::CLUSTER,
                    &aggregate_cluster("agg", children),
                ),
                named("a", type_url::CLUSTER, &eds_cluster("a")),
                named("b", type_url::CLUSTER, &eds_cluster("b")),
            ]
        };
        server.set(type_url::CLUSTER, clusters(&["a", "b"]));
        server.set(
            type_url::ENDPOINTS,
            vec![
                named(
                    "a",
                    type_url::ENDPOINTS,
                    &assignment("a", &locality(&[a.addr])),
                ),
                named(
                    "b",
                    type_url::ENDPOINTS,
                    &assignment("b", &locality(&[b.addr])),
                ),
            ],
        );
        let channel = support::xds::xds_channel(&server);
        // The first leaf takes every call.
        let counts = tally(&channel, 5).await;
        assert_eq!(
            counts.keys().cloned().collect::<Vec<_>>(),
            [a.addr.to_string()]
        );
        use grpc_channel::XdsResourceType::{Cluster, ClusterLoadAssignment};
        assert_eq!(watched(&channel, Cluster), ["a", "agg", "b"]);
        assert_eq!(watched(&channel, ClusterLoadAssignment), ["a", "b"]);
        // The aggregate drops "a": its watches go, and calls go to "b".
        server.set(type_url::CLUSTER, clusters(&["b"]));
        let mut gone = false;
        for _ in 0..500 {
            if watched(&channel, Cluster) == ["agg", "b"]
                && watched(&channel, ClusterLoadAssignment) == ["b"]
            {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(gone, "{:?}", watched(&channel, Cluster));
        let counts = tally(&channel, 5).await;
        assert_eq!(
            counts.keys().cloned().collect::<Vec<_>>(),
            [b.addr.to_string()]
        );
    })
    .await;
}

#[tokio::test]
async fn a_logical_dns_cluster_resolves_again_when_its_backend_goes() {
    bounded("LOGICAL_DNS re-resolution", async {
        // The same port on another loopback address.
        let (first, second) = support::xds::backends_on_one_port().await;
        let dns = interop::dns::TestDns::start().await.expect("dns");
        dns.add_a("backend.test", std::net::Ipv4Addr::LOCALHOST)
            .await;
        let server = management_server().await;
        support::xds::publish_logical_dns(&server, "backend.test", first.addr.port());
        let options = ResolverOptions::default()
            .with_default_server(Some(dns.addr))
            .with_min_interval(Duration::from_millis(10));
        let channel = support::xds::xds_channel_resolving(&server, options);
        let counts = tally(&channel, 3).await;
        assert_eq!(
            counts.keys().cloned().collect::<Vec<_>>(),
            [first.addr.to_string()]
        );
        // The name moves; the old backend goes: its connection fails, the policy asks for re-resolution,
        // and the new address takes the calls.
        dns.remove("backend.test", interop::dns::RecordType::A)
            .await;
        dns.add_a("backend.test", std::net::Ipv4Addr::new(127, 0, 0, 2))
            .await;
        first.shutdown();
        let mut last = None;
        for _ in 0..500 {
            match served_by(&channel, CALL).await {
                Ok(id) if id == second.addr.to_string() => {
                    last = Some(id);
                    break;
                }
                other => last = Some(format!("{other:?}")),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(last, Some(second.addr.to_string()));
    })
    .await;
}
