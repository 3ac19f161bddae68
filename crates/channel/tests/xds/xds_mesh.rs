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

/// A channel with xDS credentials over `boot`, resolving LOGICAL_DNS names with the test DNS at `dns`.
fn secured_dns_channel(boot: String, dns: std::net::SocketAddr) -> Channel {
    Channel::builder(format!("xds:///{}", support::xds::NAME))
        .xds_bootstrap(boot)
        .xds_credentials()
        .resolver_options(
            grpc_channel::ResolverOptions::default()
                .with_default_server(Some(dns))
                .with_query_timeout(Duration::from_secs(2)),
        )
        .build()
        .expect("xds channel")
}

/// Publishes the Listener, routes (`x-cluster: plain` to "plain", the rest to "sec") and the clusters:
/// "sec" an EDS cluster of `backend` with mTLS, "plain" a LOGICAL_DNS cluster of `host:port` without
/// security.
fn publish_sec_and_plain(
    server: &interop::xds_server::ManagementServer,
    backend: std::net::SocketAddr,
    host: &str,
    port: u16,
) {
    use interop::xds_resources::{assignment, logical_dns_cluster, tls_cluster};
    publish(
        server,
        &["*"],
        vec![
            route_to_cluster(&RouteMatchSpec::any().header("x-cluster", "plain"), "plain"),
            route_to_cluster(&RouteMatchSpec::any(), "sec"),
        ],
        &[],
    );
    server.set(
        type_url::CLUSTER,
        vec![
            named(
                "sec",
                type_url::CLUSTER,
                &tls_cluster(
                    "sec",
                    Some("identity"),
                    "roots",
                    &[super::xds_security::SERVER_SPIFFE],
                ),
            ),
            named(
                "plain",
                type_url::CLUSTER,
                &logical_dns_cluster("plain", host, port),
            ),
        ],
    );
    server.set(
        type_url::ENDPOINTS,
        vec![named(
            "sec",
            type_url::ENDPOINTS,
            &assignment("sec", &locality(&[backend])),
        )],
    );
}

// A29: a cluster without security uses the channel's own (plaintext) transport; a secured cluster's
// connections are its own, "distinct settings never share subchannels or connections"
// (crates/channel/src/xds/credentials.rs docs). When the same address is an EDS endpoint of a secured
// cluster and the LOGICAL_DNS answer of a plain one, a call routed to the plain cluster must go over
// plaintext (and fail against this TLS-only backend); it must never ride the secured cluster's mTLS
// connection, and the secured cluster's calls must keep passing.
#[tokio::test]
async fn an_address_in_a_secured_and_a_plain_cluster_gets_each_clusters_own_transport() {
    bounded("same address, two transports", async {
        let m = super::xds_security::mesh("same-address").await;
        let (backend, seen) = super::xds_security::mtls_backend(&m.ca).await;
        let dns = interop::dns::TestDns::start().await.expect("dns");
        dns.add_a("backend.test", std::net::Ipv4Addr::LOCALHOST)
            .await;
        publish_sec_and_plain(&m.server, backend.addr, "backend.test", backend.addr.port());
        let boot = super::xds_security::bootstrap(&m.server, &m.dir.0, "600s");
        let ch = secured_dns_channel(boot, dns.addr);
        let by = served_by(&ch, CALL).await.expect("an mTLS call to \"sec\"");
        assert_eq!(by, backend.addr.to_string());
        for _ in 0..5 {
            let plain = support::xds::unary_served_by(&ch, &[("x-cluster", "plain")]).await;
            assert!(
                plain.is_err(),
                "a call routed to the plaintext cluster was served by the TLS-only backend (over the \
                 secured cluster's connection): {plain:?}"
            );
            served_by(&ch, CALL)
                .await
                .expect("the secured cluster's calls keep passing");
        }
        assert!(seen
            .lock()
            .iter()
            .all(|c| *c == super::xds_security::der(&m.client.cert_pem)));
    })
    .await;
}

/// How many tasks are alive on this runtime.
fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

// A channel closed (`Channel::close()`, the value kept) stops everything it started: its ADS stream, its
// resolver, each LOGICAL_DNS name's resolver task, its connections over each cluster's transport. A user
// closing channels that used an xDS mesh (secured EDS cluster and a LOGICAL_DNS cluster) expects no task
// left running, as `closing_the_only_xds_channel_leaves_no_task_behind` shows for a plain EDS cluster.
#[tokio::test]
async fn closing_a_channel_with_secured_and_logical_dns_clusters_leaves_no_task_behind() {
    bounded("close a mesh channel", async {
        let m = super::xds_security::mesh("close-mesh").await;
        let (backend, _seen) = super::xds_security::mtls_backend(&m.ca).await;
        let plain = interop_server_handle().await;
        let dns = interop::dns::TestDns::start().await.expect("dns");
        dns.add_a("backend.test", std::net::Ipv4Addr::LOCALHOST)
            .await;
        publish_sec_and_plain(&m.server, backend.addr, "backend.test", plain.addr.port());
        let boot = super::xds_security::bootstrap(&m.server, &m.dir.0, "600s");
        // A first channel warms what is process-wide (system roots, the DNS client).
        let warm = secured_dns_channel(boot.clone(), dns.addr);
        served_by(&warm, CALL).await.expect("an mTLS call");
        support::xds::unary_served_by(&warm, &[("x-cluster", "plain")])
            .await
            .expect("a plaintext call");
        warm.close();
        drop(warm);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = alive_tasks();
        let mut kept = Vec::new();
        for _ in 0..5 {
            let ch = secured_dns_channel(boot.clone(), dns.addr);
            served_by(&ch, CALL).await.expect("an mTLS call");
            support::xds::unary_served_by(&ch, &[("x-cluster", "plain")])
                .await
                .expect("a plaintext call");
            ch.close();
            kept.push(ch);
        }
        let mut after = 0;
        for _ in 0..200 {
            after = alive_tasks();
            if after <= before {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            after <= before,
            "tasks left: {before} before, {after} after 5 closed channels"
        );
        drop(kept);
    })
    .await;
}
