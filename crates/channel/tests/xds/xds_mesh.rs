//! Where the xDS mesh features meet: a cluster's outlier detection (A50's xDS mapping) and its
//! priorities, an aggregate cluster's (A37/A75) leaves.
//!
//! Every test is bounded (`support::xds::BOUND`); waits are bounded polling loops.

#![cfg(feature = "xds")]

use grpc_test_support as support;

use std::time::Duration;

use grpc_channel::Channel;
use interop::faulty::FaultyServer;
use interop::xds_resources::{
    aggregate_cluster, eds_cluster, named, route_to_cluster, type_url,
    with_failure_percentage_ejection, LocalitySpec, RouteMatchSpec,
};
use support::xds::{bounded, locality, management_server, publish, xds_channel, CALL};
use support::{interop_server_handle, served_by};

/// Calls until `addr` shows as ejected (bounded); whether it did.
async fn until_ejected(channel: &Channel, addrs: &[String]) -> bool {
    for _ in 0..500 {
        let _ = served_by(channel, CALL).await;
        let ejected = channel.stats().ejected_addresses;
        if addrs.iter().all(|a| ejected.contains(a)) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

/// Calls until one is served by `want` (bounded): the statuses of the calls that were not.
async fn until_served_by(channel: &Channel, want: &str) -> Result<(), Vec<String>> {
    let mut other = Vec::new();
    for _ in 0..200 {
        match served_by(channel, CALL).await {
            Ok(by) if by == want => return Ok(()),
            Ok(by) => other.push(by),
            Err(status) => other.push(format!("{status:?}")),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    other.dedup();
    Err(other)
}

// gRFC A50 / grpc-go: outlier detection sits under the priority policy (cluster_impl → outlier_detection
// → round_robin); an ejected endpoint looks TRANSIENT_FAILURE to the child, so a priority whose every
// endpoint is ejected is TRANSIENT_FAILURE and the priority policy fails over to the next priority. A user
// with a healthy backend at priority 1 expects calls to land there once priority 0's backends are all
// ejected. Wrong: crates/lb/src/xds_clusters.rs `cluster_pick` (~line 486) keeps priority 0 selected
// (its child is still READY: the ejection only filters the picks) and fails every call with "every READY
// endpoint of priority 0 is ejected by outlier detection"; the ring_hash branch does the same (the
// ejected endpoints look TRANSIENT_FAILURE to its ring only, never to the priority policy).
#[tokio::test]
async fn a_priority_whose_every_endpoint_is_ejected_fails_over_to_the_next_priority() {
    bounded("ejection fails over", async {
        let good = interop_server_handle().await;
        let bad_a = FaultyServer::start().await.expect("faulty server");
        let bad_b = FaultyServer::start().await.expect("faulty server");
        let server = management_server().await;
        let mut standby = LocalitySpec::new("z2", &[good.addr]);
        standby.priority = 1;
        let mut localities = locality(&[bad_a.addr, bad_b.addr]);
        localities.push(standby);
        publish(
            &server,
            &["*"],
            vec![route_to_cluster(&RouteMatchSpec::any(), "c")],
            &[("c", localities)],
        );
        server.set(
            type_url::CLUSTER,
            vec![named(
                "c",
                type_url::CLUSTER,
                &with_failure_percentage_ejection(eds_cluster("c"), 100, 50, 2, 4),
            )],
        );
        let channel = xds_channel(&server);
        let bad = [bad_a.addr.to_string(), bad_b.addr.to_string()];
        assert!(
            until_ejected(&channel, &bad).await,
            "priority 0's failing endpoints were never both ejected"
        );
        // Ejected for 30 s: priority 0 has no usable endpoint; priority 1's backend serves.
        let served = until_served_by(&channel, &good.addr.to_string()).await;
        assert!(
            served.is_ok(),
            "no call reached priority 1 while priority 0 was all ejected: {served:?}"
        );
    })
    .await;
}

// A37/A75: an aggregate cluster fails over from a leaf that cannot take calls to the next leaf; a leaf
// whose every endpoint its own outlier detection ejected cannot take calls (grpc-go: its priority is
// TRANSIENT_FAILURE), so the next leaf serves.
#[tokio::test]
async fn an_aggregate_fails_over_from_a_leaf_whose_every_endpoint_is_ejected() {
    bounded("aggregate over an ejected leaf", async {
        let good = interop_server_handle().await;
        let bad_a = FaultyServer::start().await.expect("faulty server");
        let bad_b = FaultyServer::start().await.expect("faulty server");
        let server = management_server().await;
        publish(
            &server,
            &["*"],
            vec![route_to_cluster(&RouteMatchSpec::any(), "agg")],
            &[
                ("od", locality(&[bad_a.addr, bad_b.addr])),
                ("spare", locality(&[good.addr])),
            ],
        );
        server.set(
            type_url::CLUSTER,
            vec![
                named(
                    "agg",
                    type_url::CLUSTER,
                    &aggregate_cluster("agg", &["od", "spare"]),
                ),
                named(
                    "od",
                    type_url::CLUSTER,
                    &with_failure_percentage_ejection(eds_cluster("od"), 100, 50, 2, 4),
                ),
                named("spare", type_url::CLUSTER, &eds_cluster("spare")),
            ],
        );
        let channel = xds_channel(&server);
        let bad = [bad_a.addr.to_string(), bad_b.addr.to_string()];
        assert!(
            until_ejected(&channel, &bad).await,
            "the leaf's failing endpoints were never both ejected"
        );
        let served = until_served_by(&channel, &good.addr.to_string()).await;
        assert!(
            served.is_ok(),
            "no call reached the aggregate's second leaf while the first was all ejected: {served:?}"
        );
    })
    .await;
}
