//! Where the xDS mesh features meet: a cluster's outlier detection (A50's xDS mapping) and its
//! priorities, an aggregate cluster's (A37/A75) leaves.
//!
//! Every test is bounded (`support::xds::BOUND`); waits are bounded polling loops.

#![cfg(feature = "xds")]

use grpc_test_support as support;

use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use grpc_channel::Channel;
use interop::dns::TestDns;
use interop::faulty::FaultyServer;
use interop::server::ServerHandle;
use interop::xds_resources::{
    aggregate_cluster, eds_cluster, named, route_to_cluster, type_url,
    with_failure_percentage_ejection, LocalitySpec, RouteMatchSpec,
};
use interop::xds_server::ManagementServer;
use support::xds::{bounded, locality, management_server, publish, xds_channel, CALL};
use support::{interop_server_handle, served_by};

use super::xds_security::{mesh_bootstrap, mtls_channel, only_first_identity, Mesh, Seen};

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

/// Priority 0 (locality "z1"): `first`; priority 1 (locality "z2"): `standby`.
fn with_standby(first: &[SocketAddr], standby: SocketAddr) -> Vec<LocalitySpec> {
    let mut spare = LocalitySpec::new("z2", &[standby]);
    spare.priority = 1;
    let mut localities = locality(first);
    localities.push(spare);
    localities
}

/// The ejection tests' servers: `good` serves, `bad_a` and `bad_b` fail every call, `server` is the
/// management server.
struct Ejection {
    good: ServerHandle,
    bad_a: FaultyServer,
    bad_b: FaultyServer,
    server: ManagementServer,
}

impl Ejection {
    async fn start() -> Self {
        Ejection {
            good: interop_server_handle().await,
            bad_a: FaultyServer::start().await.expect("faulty server"),
            bad_b: FaultyServer::start().await.expect("faulty server"),
            server: management_server().await,
        }
    }

    /// Publishes every call routed to the Cluster `c` (`cluster`): priority 0 the failing endpoints,
    /// priority 1 the good one.
    fn publish_priorities(&self, cluster: Cluster) {
        publish(
            &self.server,
            &["*"],
            vec![route_to_cluster(&RouteMatchSpec::any(), "c")],
            &[(
                "c",
                with_standby(&[self.bad_a.addr, self.bad_b.addr], self.good.addr),
            )],
        );
        self.server.set(
            type_url::CLUSTER,
            vec![named("c", type_url::CLUSTER, &cluster)],
        );
    }

    /// Publishes every call routed to the aggregate "agg" of "od" (the Cluster `od`, of the failing
    /// endpoints) and "spare" (an EDS cluster of the good one).
    fn publish_aggregate(&self, od: Cluster) {
        publish(
            &self.server,
            &["*"],
            vec![route_to_cluster(&RouteMatchSpec::any(), "agg")],
            &[
                ("od", locality(&[self.bad_a.addr, self.bad_b.addr])),
                ("spare", locality(&[self.good.addr])),
            ],
        );
        self.server.set(
            type_url::CLUSTER,
            vec![
                named(
                    "agg",
                    type_url::CLUSTER,
                    &aggregate_cluster("agg", &["od", "spare"]),
                ),
                named("od", type_url::CLUSTER, &od),
                named("spare", type_url::CLUSTER, &eds_cluster("spare")),
            ],
        );
    }

    /// Over a channel of the management server: both failing endpoints (of `ejected`) get ejected, then
    /// a call reaches the good one (`fallback`).
    async fn assert_fails_over(&self, ejected: &str, fallback: &str) {
        let channel = xds_channel(&self.server);
        let bad = [self.bad_a.addr.to_string(), self.bad_b.addr.to_string()];
        assert!(
            until_ejected(&channel, &bad).await,
            "{ejected}'s failing endpoints were never both ejected"
        );
        let served = until_served_by(&channel, &self.good.addr.to_string()).await;
        assert!(
            served.is_ok(),
            "no call reached {fallback} while {ejected} was all ejected: {served:?}"
        );
    }
}

/// The failure-percentage ejection of these tests on `cluster`: every 100 ms, 50 % failing, at least 2
/// hosts, 4 requests.
fn ejecting(cluster: Cluster) -> Cluster {
    with_failure_percentage_ejection(cluster, 100, 50, 2, 4)
}

// gRFC A50 / grpc-go: outlier detection sits under the priority policy (cluster_impl → outlier_detection
// → round_robin); an ejected endpoint looks TRANSIENT_FAILURE to the child, so a priority whose every
// endpoint is ejected is TRANSIENT_FAILURE and the priority policy fails over to the next priority. A user
// with a healthy backend at priority 1 expects calls to land there once priority 0's backends are all
// ejected: a cluster's ejections are an overlay on that cluster's children (crates/lb/src/ejections.rs).
#[tokio::test]
async fn a_priority_whose_every_endpoint_is_ejected_fails_over_to_the_next_priority() {
    bounded("ejection fails over", async {
        let e = Ejection::start().await;
        e.publish_priorities(ejecting(eds_cluster("c")));
        // Ejected for 30 s: priority 0 has no usable endpoint; priority 1's backend serves.
        e.assert_fails_over("priority 0", "priority 1").await;
    })
    .await;
}

// As `a_priority_whose_every_endpoint_is_ejected_fails_over_to_the_next_priority`, in a RING_HASH
// cluster (grpc-go: ring_hash over ejected, i.e. TRANSIENT_FAILURE, subchannels is TRANSIENT_FAILURE, and
// the priority policy fails over).
#[tokio::test]
async fn a_ring_hash_priority_whose_every_endpoint_is_ejected_fails_over_to_the_next_priority() {
    bounded("ring_hash ejection fails over", async {
        let e = Ejection::start().await;
        e.publish_priorities(ejecting(interop::xds_resources::ring_hash_cluster(
            "c", 1024, 4096,
        )));
        // Ejected for 30 s: priority 0 has no usable endpoint; priority 1's backend serves.
        e.assert_fails_over("priority 0", "priority 1").await;
    })
    .await;
}

// A37/A75: an aggregate cluster fails over from a leaf that cannot take calls to the next leaf; a leaf
// whose every endpoint its own outlier detection ejected cannot take calls (grpc-go: its priority is
// TRANSIENT_FAILURE), so the next leaf serves.
#[tokio::test]
async fn an_aggregate_fails_over_from_a_leaf_whose_every_endpoint_is_ejected() {
    bounded("aggregate over an ejected leaf", async {
        let e = Ejection::start().await;
        e.publish_aggregate(ejecting(eds_cluster("od")));
        e.assert_fails_over("the leaf", "the aggregate's second leaf")
            .await;
    })
    .await;
}

/// The test DNS server, answering "backend.test" with the loopback address.
async fn test_dns() -> TestDns {
    let dns = TestDns::start().await.expect("dns");
    dns.add_a("backend.test", std::net::Ipv4Addr::LOCALHOST)
        .await;
    dns
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
    server: &ManagementServer,
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

/// A plaintext call routed to "plain" (`x-cluster: plain`).
async fn plain_call(ch: &Channel) -> Result<String, grpc_channel::Status> {
    support::xds::unary_served_by(ch, &[("x-cluster", "plain")]).await
}

/// A mesh with its mTLS backend, a plaintext backend `plain`, the test DNS, and "sec" (mTLS to
/// `backend`) and "plain" (LOGICAL_DNS "backend.test" at `plain`'s port) published.
struct DnsMesh {
    m: Mesh,
    backend: ServerHandle,
    seen: Seen,
    plain: ServerHandle,
    dns: TestDns,
}

impl DnsMesh {
    async fn start(tag: &str) -> Self {
        let m = super::xds_security::mesh(tag).await;
        let (backend, seen) = super::xds_security::mtls_backend(&m.ca).await;
        let plain = interop_server_handle().await;
        let dns = test_dns().await;
        publish_sec_and_plain(&m.server, backend.addr, "backend.test", plain.addr.port());
        DnsMesh {
            m,
            backend,
            seen,
            plain,
            dns,
        }
    }

    /// A new channel with xDS credentials and the test DNS.
    fn channel(&self) -> Channel {
        secured_dns_channel(mesh_bootstrap(&self.m), self.dns.addr)
    }
}

/// An mTLS call to "sec" and a plaintext call to "plain" pass on `ch`.
async fn both_clusters_serve(ch: &Channel) {
    served_by(ch, CALL).await.expect("an mTLS call");
    plain_call(ch).await.expect("a plaintext call");
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
        let dns = test_dns().await;
        publish_sec_and_plain(&m.server, backend.addr, "backend.test", backend.addr.port());
        let ch = secured_dns_channel(mesh_bootstrap(&m), dns.addr);
        let by = served_by(&ch, CALL).await.expect("an mTLS call to \"sec\"");
        assert_eq!(by, backend.addr.to_string());
        for _ in 0..5 {
            let plain = plain_call(&ch).await;
            assert!(
                plain.is_err(),
                "a call routed to the plaintext cluster was served by the TLS-only backend (over the \
                 secured cluster's connection): {plain:?}"
            );
            served_by(&ch, CALL)
                .await
                .expect("the secured cluster's calls keep passing");
        }
        assert!(only_first_identity(&seen, &m));
    })
    .await;
}

/// How many tasks are alive on this runtime.
fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// How a test ends its channels.
#[derive(Clone, Copy, PartialEq)]
enum End {
    /// `Channel::close()`, the value kept until the end of the test.
    Close,
    /// Every handle dropped.
    Drop,
}

/// Five channels of a mesh with a secured and a LOGICAL_DNS cluster, each used then ended by `end`, leave
/// no task more than there were before them (bounded wait).
async fn assert_no_task_left_behind(end: End) {
    let mesh = DnsMesh::start("close-mesh").await;
    // A first channel warms what is process-wide (system roots, the DNS client).
    let warm = mesh.channel();
    both_clusters_serve(&warm).await;
    warm.close();
    drop(warm);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = alive_tasks();
    let mut kept = Vec::new();
    for _ in 0..5 {
        let ch = mesh.channel();
        both_clusters_serve(&ch).await;
        match end {
            End::Close => {
                ch.close();
                kept.push(ch);
            }
            End::Drop => drop(ch),
        }
    }
    let mut after = 0;
    for _ in 0..200 {
        after = alive_tasks();
        if after <= before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let how = if end == End::Close {
        "closed"
    } else {
        "dropped"
    };
    assert!(
        after <= before,
        "tasks left: {before} before, {after} after 5 {how} channels"
    );
    drop(kept);
}

// A channel closed (`Channel::close()`, the value kept) stops everything it started: its ADS stream, its
// resolver, each LOGICAL_DNS name's resolver task, its connections over each cluster's transport. A user
// closing channels that used an xDS mesh (secured EDS cluster and a LOGICAL_DNS cluster) expects no task
// left running, as `closing_the_only_xds_channel_leaves_no_task_behind` shows for a plain EDS cluster.
#[tokio::test]
async fn closing_a_channel_with_secured_and_logical_dns_clusters_leaves_no_task_behind() {
    bounded(
        "close a mesh channel",
        assert_no_task_left_behind(End::Close),
    )
    .await;
}

// As `closing_a_channel_with_secured_and_logical_dns_clusters_leaves_no_task_behind`, dropping every
// handle instead of close(): nothing it started keeps running.
#[tokio::test]
async fn dropping_a_channel_with_secured_and_logical_dns_clusters_leaves_no_task_behind() {
    bounded("drop a mesh channel", assert_no_task_left_behind(End::Drop)).await;
}

/// Sets the Cluster "sec" to an mTLS cluster checking `sans`.
fn set_sec_cluster(server: &ManagementServer, sans: &[&str]) {
    server.set(
        type_url::CLUSTER,
        vec![named(
            "sec",
            type_url::CLUSTER,
            &interop::xds_resources::tls_cluster("sec", Some("identity"), "roots", sans),
        )],
    );
}

/// Publishes every call routed to "sec", an mTLS cluster checking the backend's SPIFFE ID, of
/// `localities`.
fn publish_sec(server: &ManagementServer, localities: Vec<LocalitySpec>) {
    publish(
        server,
        &["*"],
        vec![route_to_cluster(&RouteMatchSpec::any(), "sec")],
        &[("sec", localities)],
    );
    set_sec_cluster(server, &[super::xds_security::SERVER_SPIFFE]);
}

/// Reads the rest of `stream`: how many responses, or the status it failed with.
async fn rest_of(
    mut stream: grpc_channel::Streaming<interop_proto::StreamingOutputCallResponse>,
) -> Result<usize, grpc_channel::Status> {
    let mut n = 0;
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .expect("the stream goes on")
        {
            Ok(Some(_)) => n += 1,
            Ok(None) => return Ok(n),
            Err(status) => return Err(status),
        }
    }
}

/// A mesh whose "sec" cluster is its mTLS backend, a channel over it that passed an mTLS call, and a
/// slow stream of 20 responses in flight on it.
async fn stream_in_flight(
    tag: &str,
) -> (
    Mesh,
    ServerHandle,
    Seen,
    Channel,
    grpc_channel::Streaming<interop_proto::StreamingOutputCallResponse>,
) {
    let m = super::xds_security::mesh(tag).await;
    let (backend, seen) = super::xds_security::mtls_backend(&m.ca).await;
    publish_sec(&m.server, locality(&[backend.addr]));
    let ch = mtls_channel(&m);
    served_by(&ch, CALL).await.expect("an mTLS call");
    let stream = support::xds::slow_stream(&ch, 20, Duration::from_millis(50)).await;
    (m, backend, seen, ch, stream)
}

/// The rest of `stream` (from `stream_in_flight`) arrives: 19 responses.
async fn assert_stream_finishes(
    stream: grpc_channel::Streaming<interop_proto::StreamingOutputCallResponse>,
) {
    let rest = rest_of(stream).await;
    assert_eq!(
        rest.as_ref().ok(),
        Some(&19),
        "the stream in flight was lost by a TLS-only cluster update: {rest:?}"
    );
}

// A29 + A28: a Cluster update that changes only its TLS settings (here the SAN matcher, from the
// backend's SPIFFE ID to its DNS name: both match) gives new connections the new settings; a call in
// flight, committed on a connection made with the old settings, is not lost (grpc-go keeps the old
// subchannel's transport until its streams end, as for any endpoint the update removes), and new calls
// pass over mTLS, never plaintext.
#[tokio::test]
async fn a_tls_only_cluster_update_keeps_the_call_in_flight_and_new_calls_pass() {
    bounded("tls-only update", async {
        let (m, _backend, seen, ch, stream) = stream_in_flight("tls-update").await;
        let handshakes = seen.lock().len();
        set_sec_cluster(&m.server, &[super::xds_security::SERVER_DNS]);
        // New calls pass; once one went over a new connection, the update has taken effect.
        for _ in 0..200 {
            served_by(&ch, CALL)
                .await
                .expect("calls pass across a TLS-only update");
            if seen.lock().len() > handshakes {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            seen.lock().len() > handshakes,
            "the new TLS settings never made a new connection"
        );
        assert_stream_finishes(stream).await;
    })
    .await;
}

// The same with new settings that do not match the backend (a SAN matcher naming another identity): new
// calls fail UNAVAILABLE naming the SAN mismatch and never go over plaintext; the call in flight on the
// connection the old settings made still finishes.
#[tokio::test]
async fn a_tls_update_to_a_mismatching_san_fails_new_calls_but_not_the_one_in_flight() {
    bounded("tls update to a mismatch", async {
        let (m, _backend, _seen, ch, stream) = stream_in_flight("tls-mismatch").await;
        set_sec_cluster(&m.server, &["spiffe://elsewhere/sa/x"]);
        let status = super::xds_security::first_failure(&ch).await;
        assert_eq!(status.code(), grpc_channel::Code::Unavailable, "{status:?}");
        assert!(
            status.message().contains("SANs"),
            "new calls fail on the SAN check: {status:?}"
        );
        assert_stream_finishes(stream).await;
    })
    .await;
}

/// A bootstrap listing `servers` in order, with the providers "identity" and "roots" of `dir`.
fn two_server_bootstrap(servers: &[String], dir: &std::path::Path) -> String {
    let path = |f: &str| dir.join(f).display().to_string();
    let servers: Vec<serde_json::Value> = servers
        .iter()
        .map(|u| {
            serde_json::json!({
                "server_uri": u,
                "channel_creds": [{"type": "insecure"}],
                "server_features": ["xds_v3"],
            })
        })
        .collect();
    serde_json::json!({
        "xds_servers": servers,
        "node": {"id": "mesh-fallback"},
        "certificate_providers": {
            "identity": {"plugin_name": "file_watcher", "config": {
                "certificate_file": path("client.pem"),
                "private_key_file": path("client.key"),
                "refresh_interval": "600s",
            }},
            "roots": {"plugin_name": "file_watcher", "config": {
                "ca_certificate_file": path("ca.pem"),
                "refresh_interval": "600s",
            }},
        },
    })
    .to_string()
}

// A71 + A29: while the first management server is down, the second's resources are used, whatever their
// TLS settings (here: cluster "sec" without security, a plaintext backend); once the first is back, its
// Cluster "sec" (mTLS to another backend) replaces the second's, and calls go over mTLS to the first's
// backend: nothing of the second's plaintext setting stays.
#[tokio::test]
async fn fallback_to_a_server_serving_the_cluster_without_tls_and_back_restores_mtls() {
    bounded("fallback and tls", async {
        let m = super::xds_security::mesh("fallback-tls").await;
        let (secure, seen) = super::xds_security::mtls_backend(&m.ca).await;
        let plain = interop_server_handle().await;
        publish_sec(&m.server, locality(&[secure.addr]));
        let mut first = m;
        first.server.stop().await;
        let second = management_server().await;
        publish(
            &second,
            &["*"],
            vec![route_to_cluster(&RouteMatchSpec::any(), "sec")],
            &[("sec", locality(&[plain.addr]))],
        );
        let boot = two_server_bootstrap(
            &[first.server.server_uri(), second.server_uri()],
            &first.dir.0,
        );
        let ch = super::xds_security::channel(boot, true);
        let by = served_by(&ch, CALL)
            .await
            .expect("a plaintext call via the second server");
        assert_eq!(by, plain.addr.to_string());
        first
            .server
            .restart()
            .await
            .expect("restart the first server");
        let secure_id = secure.addr.to_string();
        let _ = support::xds::call_until(&ch, "calls reach the first server's mTLS backend", |r| {
            r.as_deref().ok() == Some(secure_id.as_str())
        })
        .await;
        for _ in 0..5 {
            let by = served_by(&ch, CALL).await.expect("an mTLS call");
            assert_eq!(by, secure_id);
        }
        assert!(!seen.lock().is_empty());
        assert!(only_first_identity(&seen, &first));
    })
    .await;
}

/// Publishes every call routed to the aggregate "agg" of two mTLS leaves, each `(name, SAN it checks)`,
/// both of the one endpoint `backend`.
fn publish_aggregate_of_secured_leaves(
    server: &ManagementServer,
    backend: SocketAddr,
    leaves: [(&str, &str); 2],
) {
    let [(first, _), (second, _)] = leaves;
    publish(
        server,
        &["*"],
        vec![route_to_cluster(&RouteMatchSpec::any(), "agg")],
        &[
            (first, locality(&[backend])),
            (second, locality(&[backend])),
        ],
    );
    let tls = |name: &str, san: &str| {
        named(
            name,
            type_url::CLUSTER,
            &interop::xds_resources::tls_cluster(name, Some("identity"), "roots", &[san]),
        )
    };
    let mut clusters = vec![named(
        "agg",
        type_url::CLUSTER,
        &aggregate_cluster("agg", &[first, second]),
    )];
    clusters.extend(leaves.iter().map(|(name, san)| tls(name, san)));
    server.set(type_url::CLUSTER, clusters);
}

/// A mesh with its mTLS backend, every call routed to the aggregate "agg" of two mTLS leaves of that
/// backend (`publish_aggregate_of_secured_leaves`), and a channel with xDS credentials.
async fn secured_aggregate(
    tag: &str,
    leaves: [(&str, &str); 2],
) -> (Mesh, ServerHandle, Seen, Channel) {
    let m = super::xds_security::mesh(tag).await;
    let (backend, seen) = super::xds_security::mtls_backend(&m.ca).await;
    publish_aggregate_of_secured_leaves(&m.server, backend.addr, leaves);
    let ch = mtls_channel(&m);
    (m, backend, seen, ch)
}

/// Calls until one is served by `want` (bounded, see `support::xds::call_until`), then `n` more, each
/// served by `want`.
async fn serves_from_now_on(ch: &Channel, what: &str, want: &str, n: usize) {
    let _ = support::xds::call_until(ch, what, |r| r.as_deref().ok() == Some(want)).await;
    for _ in 0..n {
        let by = served_by(ch, CALL)
            .await
            .unwrap_or_else(|status| panic!("calls keep passing ({what}): {status:?}"));
        assert_eq!(by, want);
    }
}

// A37/A75 + A29: an aggregate of two secured leaves over the same backend address with different SAN
// matchers ("wrong" names another identity, "right" the backend's): each leaf connects with its own
// settings, so "wrong"'s connection fails the SAN check (its leaf is TRANSIENT_FAILURE) and the aggregate
// fails over to "right", whose own connection to the same address passes; every call is served over mTLS.
#[tokio::test]
async fn an_aggregate_of_two_secured_leaves_on_one_address_fails_over_by_each_leafs_san_check() {
    bounded("two secured leaves", async {
        let (_m, backend, _seen, ch) = secured_aggregate(
            "two-leaves",
            [
                ("wrong", "spiffe://elsewhere/sa/x"),
                ("right", super::xds_security::SERVER_SPIFFE),
            ],
        )
        .await;
        let want = backend.addr.to_string();
        serves_from_now_on(&ch, "a call passes via the second leaf", &want, 10).await;
    })
    .await;
}

// A37: an aggregate whose first leaf is a secured EDS cluster that cannot connect (its SAN matcher names
// another identity) fails over to its second leaf, a plaintext LOGICAL_DNS cluster; its calls go over
// plaintext to that leaf's backend, never over the first leaf's settings.
#[tokio::test]
async fn an_aggregate_fails_over_from_a_secured_eds_leaf_to_a_plain_logical_dns_leaf() {
    bounded("secured then plain", async {
        let m = super::xds_security::mesh("sec-then-dns").await;
        let (backend, _seen) = super::xds_security::mtls_backend(&m.ca).await;
        let plain = interop_server_handle().await;
        let dns = test_dns().await;
        publish(
            &m.server,
            &["*"],
            vec![route_to_cluster(&RouteMatchSpec::any(), "agg")],
            &[("sec", locality(&[backend.addr]))],
        );
        m.server.set(
            type_url::CLUSTER,
            vec![
                named(
                    "agg",
                    type_url::CLUSTER,
                    &aggregate_cluster("agg", &["sec", "dns"]),
                ),
                named(
                    "sec",
                    type_url::CLUSTER,
                    &interop::xds_resources::tls_cluster(
                        "sec",
                        Some("identity"),
                        "roots",
                        &["spiffe://elsewhere/sa/x"],
                    ),
                ),
                named(
                    "dns",
                    type_url::CLUSTER,
                    &interop::xds_resources::logical_dns_cluster(
                        "dns",
                        "backend.test",
                        plain.addr.port(),
                    ),
                ),
            ],
        );
        let ch = secured_dns_channel(mesh_bootstrap(&m), dns.addr);
        let want = plain.addr.to_string();
        serves_from_now_on(&ch, "a call passes via the DNS leaf", &want, 10).await;
    })
    .await;
}

// A37/A75 + A50: as `an_aggregate_fails_over_from_a_leaf_whose_every_endpoint_is_ejected`, with a
// RING_HASH first leaf. Its every endpoint ejected, the leaf cannot take calls (grpc-go: the ejected
// subchannels are TRANSIENT_FAILURE to ring_hash, which is then TRANSIENT_FAILURE, and so is the leaf's
// priority), so the aggregate fails over to its second leaf.
#[tokio::test]
async fn an_aggregate_fails_over_from_a_ring_hash_leaf_whose_every_endpoint_is_ejected() {
    bounded("aggregate over an ejected ring_hash leaf", async {
        let e = Ejection::start().await;
        e.publish_aggregate(ejecting(interop::xds_resources::ring_hash_cluster(
            "od", 1024, 4096,
        )));
        e.assert_fails_over("the ring_hash leaf", "the aggregate's second leaf")
            .await;
    })
    .await;
}

// Dropping every handle of a channel (no close()) releases what it held as close() does (xds_close.rs:
// `dropping_the_only_xds_channel_without_close_ends_the_ads_stream`): its transports' certificate
// providers too. So a channel built after the only one was dropped reads the provider files again and
// presents the identity now in them (A29; grpc-go releases a channel's provider references when it
// closes, C-core when its credentials go).
#[tokio::test]
async fn a_channel_built_after_the_only_one_was_dropped_presents_the_identity_now_in_the_files() {
    bounded("dropped provider", async {
        let mesh = DnsMesh::start("dropped-provider").await;
        let m = &mesh.m;
        let first = mesh.channel();
        both_clusters_serve(&first).await;
        drop(first);
        let streams = m.server.streams_opened();
        for _ in 0..500 {
            if m.server.streams_ended() == streams {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        let second_identity = m.rotate_identity();
        let second = mesh.channel();
        served_by(&second, CALL)
            .await
            .expect("an mTLS call on the new channel");
        let presented = mesh.seen.lock().last().cloned();
        assert!(
            presented == Some(super::xds_security::der(&second_identity.cert_pem)),
            "the new channel presents the identity in the files, not the one the dropped channel's \
             provider read (first identity: {})",
            presented == Some(super::xds_security::der(&m.client.cert_pem))
        );
    })
    .await;
}

// `ChannelStats::addresses` (call/telemetry.rs) gives per address "its subchannel's connectivity and health
// state"; with A29 one address can have a subchannel per transport. When two secured leaves of an
// aggregate share the backend address and only "right"'s SAN matcher accepts it, the address carries
// every call over a READY connection for the whole test: a user reading the stats expects it READY, not
// the state of "wrong"'s failing subchannel to the same address: a row shows the best state of its
// address's subchannels (crates/channel/src/control/address_stats.rs).
#[tokio::test]
async fn an_address_serving_calls_over_one_transport_reads_ready_while_another_transport_fails() {
    bounded("stats of one address, two transports", async {
        let (_m, backend, _seen, ch) = secured_aggregate(
            "stats-two-transports",
            [
                ("wrong", "spiffe://elsewhere/sa/x"),
                ("right", super::xds_security::SERVER_SPIFFE),
            ],
        )
        .await;
        let want = backend.addr.to_string();
        let _ = support::xds::call_until(&ch, "a call passes via the second leaf", |r| {
            r.as_deref().ok() == Some(want.as_str())
        })
        .await;
        // About 3 s: "wrong"'s subchannel retries (1 s backoff) meanwhile; every call passes.
        let mut states = Vec::new();
        for _ in 0..60 {
            let by = served_by(&ch, CALL)
                .await
                .expect("calls keep passing via \"right\"");
            assert_eq!(by, want);
            let state = ch.stats().addresses.get(&want).map(|a| a.state);
            if states.last() != Some(&state) {
                states.push(state);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            states,
            vec![Some(grpc_channel::ConnectivityState::Ready)],
            "the address carrying every call over a READY connection read otherwise"
        );
    })
    .await;
}

// A channel that went IDLE (its idle timeout) and is used again resolves again and serves every cluster
// with its own transport as before: the secured cluster over mTLS, the LOGICAL_DNS one over plaintext.
#[tokio::test]
async fn after_idle_a_mesh_channel_serves_its_secured_and_logical_dns_clusters_again() {
    bounded("idle and back", async {
        let mesh = DnsMesh::start("idle-mesh").await;
        let ch = Channel::builder(format!("xds:///{}", support::xds::NAME))
            .xds_bootstrap(mesh_bootstrap(&mesh.m))
            .xds_credentials()
            .idle_timeout(Duration::from_millis(200))
            .resolver_options(
                grpc_channel::ResolverOptions::default().with_default_server(Some(mesh.dns.addr)),
            )
            .build()
            .expect("xds channel");
        for round in 0..2 {
            let by = served_by(&ch, CALL).await;
            assert_eq!(
                by.as_deref().ok(),
                Some(mesh.backend.addr.to_string().as_str()),
                "round {round}: {by:?}"
            );
            let by = plain_call(&ch).await;
            assert_eq!(
                by.as_deref().ok(),
                Some(mesh.plain.addr.to_string().as_str()),
                "round {round}: {by:?}"
            );
            let mut idle = false;
            for _ in 0..200 {
                if ch.state() == grpc_channel::ConnectivityState::Idle {
                    idle = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(idle, "round {round}: the channel never went IDLE");
        }
        assert!(only_first_identity(&mesh.seen, &mesh.m));
    })
    .await;
}

// A37: a LOGICAL_DNS cluster's address is resolved as the channel resolves a `dns:` target; an IP literal
// (as control planes give for a fixed backend) resolves to itself with no DNS query (grpc-go's DNS resolver
// returns an IP literal as the address, C-core's too). The test DNS server knows no name here.
#[tokio::test]
async fn a_logical_dns_cluster_of_an_ip_literal_serves_without_a_dns_answer() {
    bounded("ip literal", async {
        let plain = interop_server_handle().await;
        let dns = TestDns::start().await.expect("dns");
        let server = management_server().await;
        support::xds::publish_logical_dns(&server, "127.0.0.1", plain.addr.port());
        let ch = support::xds::xds_channel_resolving(
            &server,
            grpc_channel::ResolverOptions::default()
                .with_default_server(Some(dns.addr))
                .with_query_timeout(Duration::from_secs(1)),
        );
        let by = served_by(&ch, CALL).await;
        assert_eq!(
            by.as_deref().ok(),
            Some(plain.addr.to_string().as_str()),
            "{by:?}"
        );
    })
    .await;
}

// A29 + A37: when no leaf of an aggregate can connect because each one's SAN matcher rejects the backend,
// a call fails UNAVAILABLE quoting why (the SAN mismatch, as a single secured cluster's calls do:
// xds_security.rs `a_san_mismatch_fails_unavailable_and_reaches_no_server`), so the user can see it is
// the mesh's TLS settings, not the backend, that fail.
#[tokio::test]
async fn an_aggregate_whose_every_secured_leaf_fails_its_san_check_quotes_the_mismatch() {
    bounded("aggregate of mismatches", async {
        let (_m, _backend, seen, ch) = secured_aggregate(
            "agg-mismatch",
            [
                ("one", "spiffe://elsewhere/sa/one"),
                ("two", "spiffe://elsewhere/sa/two"),
            ],
        )
        .await;
        let status = super::xds_security::first_failure(&ch).await;
        assert_eq!(status.code(), grpc_channel::Code::Unavailable, "{status:?}");
        assert!(
            status
                .message()
                .contains("SANs from certificate did not match SANs from xDS control plane"),
            "{status:?}"
        );
        assert!(seen.lock().is_empty(), "no call reached the server");
    })
    .await;
}

// A call failing because its cluster cannot connect quotes that cluster's connection error (grpc-go: each
// cluster's picker carries its own balancer's last error; this project: "failed to connect to all
// addresses of priority 0; last error: ..."). With a secured cluster "sec" failing its SAN check and a
// plain cluster "plain" whose only endpoint refuses connections, a call to "plain" must not be told about
// "sec"'s SAN mismatch (nor name "sec"'s backend), and a call to "sec" must quote the SAN mismatch, not
// "plain"'s refused connection: each subchannel keeps its own last error, and a cluster quotes the latest
// among its own (crates/lb/src/subchannel.rs, xds_clusters.rs).
#[tokio::test]
async fn each_clusters_failure_quotes_its_own_connection_error() {
    bounded("each cluster's own error", async {
        let m = super::xds_security::mesh("own-error").await;
        let (backend, _seen) = super::xds_security::mtls_backend(&m.ca).await;
        let (_hold, refused) = support::reserved_port();
        publish(
            &m.server,
            &["*"],
            vec![
                route_to_cluster(&RouteMatchSpec::any().header("x-cluster", "plain"), "plain"),
                route_to_cluster(&RouteMatchSpec::any(), "sec"),
            ],
            &[
                ("sec", locality(&[backend.addr])),
                ("plain", locality(&[refused])),
            ],
        );
        m.server.set(
            type_url::CLUSTER,
            vec![
                named(
                    "sec",
                    type_url::CLUSTER,
                    &interop::xds_resources::tls_cluster(
                        "sec",
                        Some("identity"),
                        "roots",
                        &["spiffe://elsewhere/sa/x"],
                    ),
                ),
                named("plain", type_url::CLUSTER, &eds_cluster("plain")),
            ],
        );
        let ch = mtls_channel(&m);
        let sec_status = super::xds_security::first_failure(&ch).await;
        assert!(sec_status.message().contains("SANs"), "{sec_status:?}");
        let mut wrong = Vec::new();
        for _ in 0..20 {
            let plain = support::xds::unary_served_by(&ch, &[("x-cluster", "plain")])
                .await
                .expect_err("nothing listens at plain's endpoint");
            if plain.message().contains("SANs")
                || plain.message().contains(&backend.addr.to_string())
            {
                wrong.push(format!("plain: {}", plain.message()));
            }
            let sec = served_by(&ch, CALL)
                .await
                .expect_err("sec fails its SAN check");
            if !sec.message().contains("SANs") {
                wrong.push(format!("sec: {}", sec.message()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        wrong.dedup();
        assert!(
            wrong.is_empty(),
            "a cluster's failure quoted another cluster's connection error: {wrong:#?}"
        );
    })
    .await;
}

// A29 + priorities: a secured cluster whose priority 0 endpoint fails the certificate check
// (TRANSIENT_FAILURE) fails over to its priority 1 endpoint, connected with the same cluster's settings,
// which pass.
#[tokio::test]
async fn a_secured_cluster_fails_over_from_a_priority_failing_its_certificate_check() {
    bounded("san failover", async {
        let m = super::xds_security::mesh("san-failover").await;
        let (good, _seen) = super::xds_security::mtls_backend(&m.ca).await;
        // Another CA's server: its certificate is not trusted by the cluster's roots.
        let other_ca = interop::tls::TestCa::new("another CA").expect("CA");
        let (untrusted, _) = super::xds_security::mtls_backend(&other_ca).await;
        publish_sec(&m.server, with_standby(&[untrusted.addr], good.addr));
        let ch = mtls_channel(&m);
        let served = until_served_by(&ch, &good.addr.to_string()).await;
        assert!(served.is_ok(), "priority 1 never served: {served:?}");
    })
    .await;
}
