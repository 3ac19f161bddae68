//! `xds:` targets end to end: a channel built with a bootstrap naming the test management server
//! (`interop::xds_server`, tonic's HTTP/2 server) follows LDS → RDS → CDS → EDS to interop backends on
//! loopback, and its calls land where the resources say: round robin over an EDS cluster (RDS or inline
//! routes), weighted clusters, path and header routes, a route's retry policy (A44, and its edges), EDS updates while
//! calls run (and a call in flight on a removed endpoint), priority failover, a NACKed Listener that keeps
//! the last good config, a route with an unknown required filter NACKed, a Listener that never comes (A57, paused clock), Listener and Cluster deletion
//! (A88's ambient default and `fail_on_data_errors`), the management server going away or unreachable
//! (a channel built meanwhile fails at once, A57), `close()` releasing the channel's watches and its share
//! of the ADS stream, no matching
//! virtual host, locality weights, EDS `drop_overloads` (never retried, A32), a route's
//! `max_stream_duration` (A31), circuit breaking (A32) and priority recovery.
//!
//! Every test is bounded (`support::xds::BOUND` around it); waits for a condition are bounded polling loops.

#![cfg(feature = "xds")]

use grpc_test_support as support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::config::route::v3::Route;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use grpc_channel::{Channel, Code, Request, Status, Streaming};
use interop::faulty::FaultyServer;
use interop::server::ServerHandle;
use interop::xds_resources::{
    assignment, eds_cluster, inline_listener, listener_without_api_listener, named, rds_listener,
    route_configuration, route_to_cluster, route_to_weighted, type_url, with_retry_policy,
    LocalitySpec, RouteMatchSpec,
};
use interop::xds_server::ManagementServer;
use interop_proto::grpc_testing::Empty;
use interop_proto::paths;
use interop_proto::StreamingOutputCallResponse;
use support::flaky::{attempts, flaky_unary};
use support::xds::{
    bounded, call_until, listener_names, locality, management_server, nack_of, one_backend,
    publish, publish_empty_call_split, set_clusters, set_endpoints,
    set_listener_without_api_listener, set_routes_with_unknown_filter, slow_stream, tally,
    unary_served_by, xds_channel, xds_channel_at, xds_channel_for, xds_channel_with_features, CALL,
    NAME, ROUTES,
};
use support::{interop_server_handle, reserved_port, served_by};

// --- Fixtures and checks the tests share ---

/// Two interop backends and a management server, started in that order.
async fn two_backends() -> (ServerHandle, ServerHandle, ManagementServer) {
    let a = interop_server_handle().await;
    let b = interop_server_handle().await;
    (a, b, management_server().await)
}

/// An interop backend and a management server (started in that order) publishing every call to the EDS
/// cluster `cluster` of that backend alone.
async fn one_backend_in(cluster: &str) -> (ServerHandle, ManagementServer) {
    let a = interop_server_handle().await;
    let server = management_server().await;
    publish_to(&server, cluster, locality(&[a.addr]));
    (a, server)
}

/// A fault-injecting backend and a management server (started in that order) publishing every call to the
/// EDS cluster `cluster` of that backend, under a retry policy on UNAVAILABLE of `num_retries`.
async fn retrying_to_faulty(cluster: &str, num_retries: u32) -> (FaultyServer, ManagementServer) {
    let backend = FaultyServer::start().await.expect("faulty server");
    let server = management_server().await;
    publish(
        &server,
        &["*"],
        vec![retry_route(cluster, num_retries)],
        &[(cluster, locality(&[backend.addr]))],
    );
    (backend, server)
}

/// Publishes every call (any domain) to the EDS cluster `cluster` of `localities`.
fn publish_to(server: &ManagementServer, cluster: &str, localities: Vec<LocalitySpec>) {
    publish(
        server,
        &["*"],
        vec![route_to_cluster(&RouteMatchSpec::any(), cluster)],
        &[(cluster, localities)],
    );
}

/// Publishes the header routes: `x-tenant: blue` to the cluster "blue" of `blue`, anything else to the
/// cluster "other" of `other`.
fn publish_tenant_routes(server: &ManagementServer, blue: SocketAddr, other: SocketAddr) {
    publish(
        server,
        &["*"],
        vec![
            route_to_cluster(&RouteMatchSpec::any().header("x-tenant", "blue"), "blue"),
            route_to_cluster(&RouteMatchSpec::any(), "other"),
        ],
        &[("blue", locality(&[blue])), ("other", locality(&[other]))],
    );
}

/// A route of every call to `cluster` with a retry policy on UNAVAILABLE of `num_retries` (A44).
fn retry_route(cluster: &str, num_retries: u32) -> Route {
    with_retry_policy(
        route_to_cluster(&RouteMatchSpec::any(), cluster),
        "unavailable",
        num_retries,
    )
}

/// How many of the `counts` (of [`tally`]) `backend` answered.
fn served(counts: &BTreeMap<String, usize>, backend: SocketAddr) -> Option<usize> {
    counts.get(&backend.to_string()).copied()
}

/// The share of the `n` calls of `counts` (of [`tally`]) that `backend` answered lies in `range`; `what`
/// names the backend's cluster or locality.
fn assert_share(
    counts: &BTreeMap<String, usize>,
    n: usize,
    backend: SocketAddr,
    range: std::ops::RangeInclusive<f64>,
    what: &str,
) {
    let share = served(counts, backend).unwrap_or(0) as f64 / n as f64;
    assert!(
        range.contains(&share),
        "share of {what}: {share} ({counts:?})"
    );
}

/// `n` calls on `channel`, every one answered by `backend`.
async fn all_served_by(channel: &Channel, n: usize, backend: SocketAddr) {
    let counts = tally(channel, n).await;
    assert_eq!(served(&counts, backend), Some(n), "{counts:?}");
}

/// Whether `done` holds within 1000 checks 10 ms apart.
async fn comes_true(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..1000 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Reads `stream` (each read bounded by [`CALL`], `what` names the wait) to its end: how many responses
/// came, and the error that ended it, if one did.
async fn drain(
    stream: &mut Streaming<StreamingOutputCallResponse>,
    what: &str,
) -> (usize, Option<Status>) {
    let mut received = 0;
    loop {
        match tokio::time::timeout(CALL, stream.message())
            .await
            .expect(what)
        {
            Ok(Some(_)) => received += 1,
            Ok(None) => return (received, None),
            Err(status) => return (received, Some(status)),
        }
    }
}

/// An EDS cluster "moving" whose only endpoint an EDS update replaces: two interop backends and a
/// management server (started in that order) publishing every call to `old`, and a channel.
struct Moving {
    old: ServerHandle,
    new: ServerHandle,
    server: ManagementServer,
    channel: Channel,
}

impl Moving {
    async fn start() -> Moving {
        let (old, new, server) = two_backends().await;
        publish_to(&server, "moving", locality(&[old.addr]));
        let channel = xds_channel(&server);
        Moving {
            old,
            new,
            server,
            channel,
        }
    }

    /// The EDS update: the new endpoint replaces the old one.
    fn update(&self) {
        set_endpoints(&self.server, &[("moving", locality(&[self.new.addr]))]);
    }

    /// Calls until one reaches the new endpoint.
    async fn calls_reach_the_new_endpoint(&self) -> Result<String, Status> {
        let new = self.new.addr.to_string();
        call_until(&self.channel, "new calls reach the new endpoint", |r| {
            r.as_ref().ok() == Some(&new)
        })
        .await
    }
}

/// 1. Listener → RDS route → cluster → EDS with two endpoints: every call succeeds and round robin
/// reaches both backends. The virtual host matches the service name exactly.
#[tokio::test]
async fn an_rds_route_to_an_eds_cluster_of_two_endpoints_reaches_both() {
    bounded("two endpoints", async {
        let (a, b, server) = two_backends().await;
        publish(
            &server,
            &[NAME],
            vec![route_to_cluster(&RouteMatchSpec::any(), "cluster-ab")],
            &[("cluster-ab", locality(&[a.addr, b.addr]))],
        );
        let channel = xds_channel(&server);
        let counts = tally(&channel, 40).await;
        assert_eq!(counts.values().sum::<usize>(), 40);
        for backend in [a.addr, b.addr] {
            let served = counts.get(&backend.to_string()).copied().unwrap_or(0);
            assert!(served > 0, "{backend} served no call: {counts:?}");
        }
        // The client ACKed each type (a request naming the version it received).
        for t in [
            type_url::LISTENER,
            type_url::ROUTE,
            type_url::CLUSTER,
            type_url::ENDPOINTS,
        ] {
            let ack = server
                .wait_for_request(Duration::from_secs(5), |r| {
                    r.type_url == t && !r.version_info.is_empty() && r.error_detail.is_none()
                })
                .await;
            assert!(ack.is_some(), "no ACK of {t}: {:?}", server.requests());
        }
    })
    .await;
}

/// 1b. The same with the routes inline in the Listener's HttpConnectionManager (no RDS): calls succeed
/// and the client never asks for a RouteConfiguration.
#[tokio::test]
async fn inline_routes_in_the_listener_reach_the_cluster() {
    bounded("inline routes", async {
        let a = interop_server_handle().await;
        let server = management_server().await;
        let routes = route_configuration(
            "inline",
            &[NAME],
            vec![route_to_cluster(&RouteMatchSpec::any(), "inline-cluster")],
        );
        server.set(
            type_url::LISTENER,
            vec![named(
                NAME,
                type_url::LISTENER,
                &inline_listener(NAME, routes),
            )],
        );
        set_clusters(&server, &[("inline-cluster", locality(&[a.addr]))]);
        let channel = xds_channel(&server);
        all_served_by(&channel, 10, a.addr).await;
        assert!(
            !server
                .requests()
                .iter()
                .any(|r| r.type_url == type_url::ROUTE && !r.resource_names.is_empty()),
            "no RDS subscription with inline routes: {:?}",
            server.requests()
        );
    })
    .await;
}

/// 2. weighted_clusters 80/20 over two clusters of one backend each: of 400 calls the first cluster's
/// backend answers between 70 % and 90 %.
#[tokio::test]
async fn weighted_clusters_split_calls_by_weight() {
    bounded("weighted clusters", async {
        let (a, b, server) = two_backends().await;
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
        let channel = xds_channel(&server);
        let counts = tally(&channel, 400).await;
        let heavy = served(&counts, a.addr).unwrap_or(0);
        let light = served(&counts, b.addr).unwrap_or(0);
        assert_eq!(heavy + light, 400, "{counts:?}");
        assert_share(&counts, 400, a.addr, 0.70..=0.90, "the 80-weight cluster");
    })
    .await;
}

/// 3a. Path routing: a route for the whole path of `EmptyCall` goes to cluster A (an interop server), the
/// catch-all to cluster B (the fault-injecting server, which answers UNIMPLEMENTED "no such fault" to the
/// interop methods). EmptyCall succeeds (so it reached A) and UnaryCall gets B's answer.
#[tokio::test]
async fn a_path_route_sends_one_method_to_its_own_cluster() {
    bounded("path routing", async {
        let a = interop_server_handle().await;
        let b = FaultyServer::start().await.expect("faulty server");
        let server = management_server().await;
        publish_empty_call_split(&server, a.addr, b.addr);
        let channel = xds_channel(&server);
        for i in 0..10 {
            let empty = tokio::time::timeout(
                CALL,
                channel.unary::<_, Empty>(paths::EMPTY_CALL, Request::new(Empty {})),
            )
            .await
            .expect("the call ends by itself");
            if let Err(status) = empty {
                panic!("EmptyCall {i} (routed to the interop server) failed: {status:?}");
            }
            let unary = unary_served_by(&channel, &[]).await;
            match unary {
                Err(status) => {
                    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
                    assert!(
                        status.message().contains("no such fault"),
                        "not the faulty server's answer: {status:?}"
                    );
                }
                Ok(id) => panic!("UnaryCall {i} reached the interop server {id}, not cluster B"),
            }
        }
    })
    .await;
}

/// 3b. Header routing: `x-tenant: blue` goes to cluster A, anything else to cluster B.
#[tokio::test]
async fn a_header_route_sends_matching_metadata_to_its_own_cluster() {
    bounded("header routing", async {
        let (a, b, server) = two_backends().await;
        publish_tenant_routes(&server, a.addr, b.addr);
        let channel = xds_channel(&server);
        let (a_id, b_id) = (a.addr.to_string(), b.addr.to_string());
        for i in 0..10 {
            let blue = unary_served_by(&channel, &[("x-tenant", "blue")]).await;
            assert_eq!(blue.as_ref().ok(), Some(&a_id), "blue call {i}: {blue:?}");
            let red = unary_served_by(&channel, &[("x-tenant", "red")]).await;
            assert_eq!(red.as_ref().ok(), Some(&b_id), "red call {i}: {red:?}");
            let none = unary_served_by(&channel, &[]).await;
            assert_eq!(
                none.as_ref().ok(),
                Some(&b_id),
                "call {i} without x-tenant: {none:?}"
            );
        }
    })
    .await;
}

/// 4. A route's retry policy (`retry_on: unavailable`, `num_retries: 2`, A44) against a backend that fails
/// UNAVAILABLE twice and then answers: three attempts, and the response says two preceded it.
#[tokio::test]
async fn a_route_retry_policy_retries_unavailable() {
    bounded("route retry policy", async {
        let (backend, server) = retrying_to_faulty("flaky", 2).await;
        let channel = xds_channel(&server);
        let response = flaky_unary(&channel, "xds-retry", &[("x-fail-times", "2")])
            .await
            .expect("the third attempt succeeds");
        assert_eq!(response.previous_rpc_attempts(), 2);
        let seen = attempts(&[&backend], "xds-retry");
        assert_eq!(
            seen,
            vec![
                (1, None),
                (2, Some("1".to_owned())),
                (3, Some("2".to_owned()))
            ],
            "three attempts on the backend, each naming the attempts before it"
        );
        // A fourth failure would not be retried: num_retries 2 is three attempts in all.
        let failed = flaky_unary(&channel, "xds-retry-exhausted", &[("x-fail-times", "5")])
            .await
            .expect_err("three failing attempts");
        assert_eq!(failed.code(), Code::Unavailable, "{failed:?}");
        assert_eq!(attempts(&[&backend], "xds-retry-exhausted").len(), 3);
    })
    .await;
}

/// 5. An EDS update mid-run: a new endpoint replaces the old one while 200 calls run one after another. No
/// call fails, calls reach the new endpoint, and once one has, none goes to the old one again.
#[tokio::test]
async fn an_eds_update_moves_calls_to_the_new_endpoint_without_failures() {
    bounded("EDS update", async {
        let moving = Moving::start().await;
        let channel = &moving.channel;
        let (old_id, new_id) = (moving.old.addr.to_string(), moving.new.addr.to_string());
        // Each call's answer (the server's id, or the failure), so that one failure does not hide the rest.
        let mut results: Vec<Result<String, Status>> = Vec::with_capacity(200);
        for i in 0..200 {
            if i == 50 {
                moving.update();
            }
            results.push(served_by(channel, CALL).await);
        }
        // The update may land after the 200th call on a fast machine: keep calling, bounded.
        let reached_new = |r: &[Result<String, Status>]| r.iter().any(|x| x.as_ref().ok() == Some(&new_id));
        let mut extra = 0;
        while !reached_new(&results) && extra < 500 {
            results.push(served_by(channel, CALL).await);
            extra += 1;
        }
        let failed: Vec<(usize, &Status)> = results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().err().map(|s| (i, s)))
            .collect();
        assert!(
            failed.is_empty(),
            "{} of {} calls failed (the update was published before call 50): {failed:?}",
            failed.len(),
            results.len()
        );
        let served: Vec<&String> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert!(
            served[..50].iter().all(|id| **id == old_id),
            "before the update only the old endpoint serves"
        );
        let first_new = served
            .iter()
            .position(|id| **id == new_id)
            .expect("calls reach the new endpoint");
        let stale: Vec<usize> = served[first_new..]
            .iter()
            .enumerate()
            .filter(|(_, id)| ***id == old_id)
            .map(|(i, _)| first_new + i)
            .collect();
        assert!(
            stale.is_empty(),
            "calls went to the removed endpoint after the new one served (call {first_new}): {stale:?}"
        );
    })
    .await;
}

/// 5b. The cause of 5's failure, deterministically: a server-streaming call in flight on an endpoint that
/// an EDS update removes. gRPC lets calls on a removed subchannel finish (its connection drains); the call
/// must end OK with every response, while new calls go to the new endpoint.
#[tokio::test]
async fn a_call_in_flight_on_a_removed_endpoint_finishes() {
    bounded("in flight across an EDS update", async {
        let moving = Moving::start().await;
        // Three responses, 300 ms apart; the first has arrived.
        let mut stream = slow_stream(&moving.channel, 3, Duration::from_millis(300)).await;

        moving.update();
        let moved = moving.calls_reach_the_new_endpoint().await;
        assert!(moved.is_ok());

        let (rest, failed) = drain(&mut stream, "the stream goes on").await;
        if let Some(status) = failed {
            panic!(
                "the call in flight on the removed endpoint failed after {} responses: {status:?}",
                rest + 1
            );
        }
        assert_eq!(rest, 2, "every response arrives");
    })
    .await;
}

/// 5c. A connection let go of by an EDS update finishes its calls, but closing the channel closes it too:
/// a long stream in flight on the removed endpoint ends with an error at `close()`, well before its last
/// response.
#[tokio::test]
async fn closing_the_channel_closes_a_connection_left_by_an_eds_update() {
    bounded("close with a detached connection", async {
        let moving = Moving::start().await;
        // 100 responses, 100 ms apart (10 s in all); the first has arrived.
        let mut stream = slow_stream(&moving.channel, 100, Duration::from_millis(100)).await;
        moving.update();
        moving.calls_reach_the_new_endpoint().await.expect("moved");

        moving.channel.close();
        let (rest, end) = drain(&mut stream, "the stream ends by itself").await;
        let received = 1 + rest;
        assert!(
            end.is_some() && received < 100,
            "the stream went on after close(): {received} responses, end {end:?}"
        );
    })
    .await;
}

/// 5d. Closing an xDS channel stops its resolver and its watches, and lets go of its share of the ADS
/// stream: its only channel closed, the stream ends (the management server sees it go), and the channel
/// has no xDS resources to show any more.
#[tokio::test]
async fn closing_the_only_xds_channel_ends_the_ads_stream() {
    bounded("close ends the stream", async {
        let (_a, server) = one_backend().await;
        let channel = xds_channel(&server);
        served_by(&channel, CALL).await.expect("a call");
        assert!(channel.xds_resources().is_some());
        assert_eq!(server.streams_ended(), 0);

        channel.close();
        let ended = comes_true(|| server.streams_ended() == 1).await;
        assert!(ended, "the ADS stream outlived close()");
        assert_eq!(server.streams_opened(), 1, "and no new one opens");
        assert!(channel.xds_resources().is_none());
    })
    .await;
}

/// 5e. Two channels share the ADS stream; closing one unsubscribes its Listener (a request naming only
/// the other channel's), and a new Listener version is ACKed for the other channel's Listener alone,
/// while that channel goes on on the same stream.
#[tokio::test]
async fn closing_one_of_two_xds_channels_unsubscribes_its_listener_only() {
    bounded("close releases its share", async {
        const OTHER: &str = "other.test";
        let (_a, server) = one_backend().await;
        let listeners = || {
            vec![
                named(NAME, type_url::LISTENER, &rds_listener(NAME, ROUTES)),
                named(OTHER, type_url::LISTENER, &rds_listener(OTHER, ROUTES)),
            ]
        };
        server.set(type_url::LISTENER, listeners());
        let closing = xds_channel(&server);
        let staying = xds_channel_for(&server, OTHER);
        served_by(&closing, CALL).await.expect("a call");
        served_by(&staying, CALL).await.expect("a call");
        let names = |r: &DiscoveryRequest| {
            let mut names = r.resource_names.clone();
            names.sort();
            names
        };
        server
            .wait_for_request(Duration::from_secs(10), |r| {
                r.type_url == type_url::LISTENER && names(r) == [OTHER, NAME]
            })
            .await
            .expect("one stream asks for both Listeners");
        let seen = server.requests().len();
        let server = &server;
        // The first Listener request after `skip` that `wanted` accepts: requests still in flight when the
        // count was taken (the ACK of the version that carried both Listeners) are passed over.
        let next_listener_request = |skip: usize, wanted: fn(&DiscoveryRequest) -> bool| async move {
            for _ in 0..1000 {
                if let Some(r) = server
                    .requests_after(skip)
                    .into_iter()
                    .find(|r| r.type_url == type_url::LISTENER && wanted(r))
                {
                    return r;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("no such Listener request: {:?}", server.requests_after(skip));
        };

        closing.close();
        let unsubscribed = next_listener_request(seen, |r| r.resource_names.len() != 2).await;
        assert_eq!(names(&unsubscribed), [OTHER], "{unsubscribed:?}");
        // A new version (both Listeners changed): the ACK names the staying channel's Listener only.
        let seen = server.requests().len();
        server.set(type_url::LISTENER, listeners());
        let ack = next_listener_request(seen, |r| r.version_info == "3").await;
        assert_eq!(names(&ack), vec![OTHER.to_owned()], "{ack:?}");
        served_by(&staying, CALL)
            .await
            .expect("the other channel goes on");
        assert_eq!(server.streams_opened(), 1, "on the same stream");
        assert_eq!(listener_names(&staying), [OTHER]);
    })
    .await;
}

/// 6. Priority failover: the priority-0 locality's only endpoint is a port where nothing listens; priority
/// 1 has a live backend. Calls succeed, on priority 1.
#[tokio::test]
async fn calls_fail_over_to_the_next_priority_when_the_first_is_down() {
    bounded("priority failover", async {
        let (_held, dead) = reserved_port();
        let live = interop_server_handle().await;
        let server = management_server().await;
        let mut p0 = LocalitySpec::new("z-dead", &[dead]);
        p0.priority = 0;
        let mut p1 = LocalitySpec::new("z-live", &[live.addr]);
        p1.priority = 1;
        publish_to(&server, "prioritized", vec![p0, p1]);
        let channel = xds_channel(&server);
        all_served_by(&channel, 20, live.addr).await;
    })
    .await;
}

/// 7. NACK: after a good config, the server sends a Listener without `api_listener`. The client NACKs it
/// (a request with `error_detail`) and calls go on under the previous config.
#[tokio::test]
async fn a_nacked_listener_keeps_the_previous_config() {
    bounded("NACK", async {
        let (a, server) = one_backend_in("good").await;
        let channel = xds_channel(&server);
        all_served_by(&channel, 10, a.addr).await;

        set_listener_without_api_listener(&server);
        let nack = nack_of(&server, type_url::LISTENER, "the client").await;
        // The NACK names the last good version (the first Listener), not the rejected one.
        assert_eq!(nack.version_info, "1", "{nack:?}");

        all_served_by(&channel, 20, a.addr).await;
    })
    .await;
}

/// 7b. NACK of a route with an unknown, non-optional filter override (A39): after a good config, the
/// RouteConfiguration's only route (to another cluster) carries a `typed_per_filter_config` of a type no
/// client knows. The client NACKs the RouteConfiguration, naming the filter, and calls stay on the first
/// cluster.
#[tokio::test]
async fn a_route_with_an_unknown_required_filter_is_nacked() {
    bounded("NACK of a filter override", async {
        let (a, b, server) = two_backends().await;
        publish(
            &server,
            &["*"],
            vec![route_to_cluster(&RouteMatchSpec::any(), "good")],
            &[
                ("good", locality(&[a.addr])),
                ("other", locality(&[b.addr])),
            ],
        );
        let channel = xds_channel(&server);
        all_served_by(&channel, 5, a.addr).await;

        set_routes_with_unknown_filter(&server, "other");
        let nack = nack_of(&server, type_url::ROUTE, "the client").await;
        assert_eq!(nack.version_info, "1", "{nack:?}");
        let detail = nack.error_detail.map(|d| d.message).unwrap_or_default();
        assert!(
            detail.contains("unknown"),
            "the NACK names the filter: {detail}"
        );

        all_served_by(&channel, 20, a.addr).await;
    })
    .await;
}

/// 7c. The channel's authority override chooses the virtual host (A28's data-plane authority): with two
/// virtual hosts, `svc.test` → one cluster and `other.test` → another, a channel to `xds:///svc.test` built
/// with `.authority("other.test")` reaches the second, and one without the override the first.
#[tokio::test]
async fn the_authority_override_chooses_the_virtual_host() {
    bounded("authority override", async {
        let (a, b, server) = two_backends().await;
        publish(
            &server,
            &[NAME],
            vec![route_to_cluster(&RouteMatchSpec::any(), "by-name")],
            &[
                ("by-name", locality(&[a.addr])),
                ("by-authority", locality(&[b.addr])),
            ],
        );
        let mut routes = route_configuration(
            ROUTES,
            &[NAME],
            vec![route_to_cluster(&RouteMatchSpec::any(), "by-name")],
        );
        let mut other = route_configuration(
            ROUTES,
            &["other.test"],
            vec![route_to_cluster(&RouteMatchSpec::any(), "by-authority")],
        );
        other.virtual_hosts[0].name = "other".to_owned();
        routes.virtual_hosts.append(&mut other.virtual_hosts);
        server.set(
            type_url::ROUTE,
            vec![named(ROUTES, type_url::ROUTE, &routes)],
        );

        let plain = xds_channel(&server);
        all_served_by(&plain, 5, a.addr).await;

        let overridden = grpc_channel::Channel::builder(format!("xds:///{NAME}"))
            .xds_bootstrap(server.bootstrap_json())
            .authority("other.test")
            .build()
            .expect("xds channel");
        all_served_by(&overridden, 5, b.addr).await;
    })
    .await;
}

/// 8. A Listener never sent: after A27's 15 s does-not-exist timer the channel has no config, and calls
/// fail UNAVAILABLE (on the paused clock; the sockets are real).
#[tokio::test(start_paused = true)]
async fn calls_fail_unavailable_when_the_listener_does_not_exist() {
    bounded("does not exist", async {
        let server = management_server().await;
        let channel = xds_channel(&server);
        let start = tokio::time::Instant::now();
        let status = served_by(&channel, Duration::from_secs(25))
            .await
            .expect_err("no Listener, no call");
        let waited = start.elapsed();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(
            waited >= Duration::from_secs(15),
            "failed after {waited:?}, before the does-not-exist timer: {status:?}"
        );
        assert!(
            waited < Duration::from_secs(20),
            "failed only after {waited:?}, well past the does-not-exist timer: {status:?}"
        );
        assert!(
            server
                .requests()
                .iter()
                .any(|r| r.type_url == type_url::LISTENER
                    && r.resource_names.iter().any(|n| n == NAME)),
            "the client asked for the Listener: {:?}",
            server.requests()
        );
    })
    .await;
}

/// The resources these tests publish are what the client accepts (and the NACK test's Listener is not):
/// each decoded by `grpc-xds` as the channel decodes them. Needs no channel, so it guards the builders
/// of `interop::xds_resources` on their own.
#[test]
fn the_published_resources_are_valid_for_the_client() {
    use grpc_xds::resource::{decode, ResourceType};
    use grpc_xds::Decoded;

    let addr: SocketAddr = "127.0.0.1:1".parse().expect("addr");
    let other: SocketAddr = "127.0.0.1:2".parse().expect("addr");
    let mut p1 = LocalitySpec::new("z2", &[other]);
    p1.priority = 1;
    let routes = route_configuration(
        ROUTES,
        &[NAME, "*"],
        vec![
            route_to_cluster(&RouteMatchSpec::path(paths::EMPTY_CALL), "a"),
            route_to_cluster(&RouteMatchSpec::any().header("x-tenant", "blue"), "a"),
            route_to_weighted(&RouteMatchSpec::any(), &[("a", 80), ("b", 20)]),
            retry_route("a", 2),
        ],
    );
    let valid = [
        (
            ResourceType::Listener,
            named(NAME, type_url::LISTENER, &rds_listener(NAME, ROUTES)),
        ),
        (
            ResourceType::RouteConfiguration,
            named(ROUTES, type_url::ROUTE, &routes),
        ),
        (
            ResourceType::Cluster,
            named("a", type_url::CLUSTER, &eds_cluster("a")),
        ),
        (
            ResourceType::ClusterLoadAssignment,
            named(
                "a",
                type_url::ENDPOINTS,
                &assignment("a", &[LocalitySpec::new("z1", &[addr]), p1]),
            ),
        ),
    ];
    for (kind, (name, any)) in valid {
        match decode(kind, &any) {
            Decoded::Valid { name: got, .. } => assert_eq!(got, name),
            other => panic!("{kind:?} {name} rejected: {other:?}"),
        }
    }
    let (_, bad) = named(
        NAME,
        type_url::LISTENER,
        &listener_without_api_listener(NAME),
    );
    assert!(
        matches!(
            decode(ResourceType::Listener, &bad),
            Decoded::Invalid { .. }
        ),
        "a Listener without api_listener is NACKed"
    );
}

/// 9a. LDS deletion under A88's default: a Listener missing from a response is an ambient error, so the
/// channel keeps the last config and calls go on succeeding; the client ACKs the response.
#[tokio::test]
async fn a_deleted_listener_keeps_the_last_config_by_default() {
    bounded("LDS deletion, default", async {
        let (a, server) = one_backend().await;
        let channel = xds_channel(&server);
        assert_eq!(tally(&channel, 5).await.len(), 1);

        server.set(type_url::LISTENER, Vec::new());
        let ack = server
            .wait_for_request(Duration::from_secs(10), |r| {
                r.type_url == type_url::LISTENER && r.version_info == "2"
            })
            .await
            .expect("the client answers the response without the Listener");
        assert!(ack.error_detail.is_none(), "deletion is no NACK: {ack:?}");
        all_served_by(&channel, 20, a.addr).await;
    })
    .await;
}

/// 9b. LDS deletion with `fail_on_data_errors` (A88): the cache drops the Listener, and calls fail
/// UNAVAILABLE; when the Listener comes back, calls succeed again.
#[tokio::test]
async fn a_deleted_listener_fails_calls_with_fail_on_data_errors() {
    bounded("LDS deletion, fail_on_data_errors", async {
        let (a, server) = one_backend().await;
        let channel = xds_channel_with_features(&server, &["fail_on_data_errors"]);
        assert_eq!(tally(&channel, 5).await.len(), 1);

        server.set(type_url::LISTENER, Vec::new());
        let failed = call_until(&channel, "calls fail after the deletion", Result::is_err).await;
        let status = failed.expect_err("an error");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");

        server.set(
            type_url::LISTENER,
            vec![named(NAME, type_url::LISTENER, &rds_listener(NAME, ROUTES))],
        );
        let back = call_until(&channel, "calls succeed again", Result::is_ok).await;
        assert_eq!(back.ok(), Some(a.addr.to_string()));
    })
    .await;
}

/// 10. The management server goes away after a good config: calls keep succeeding on the cached
/// resources (a stream error is not a data error, A88), and after a restart on the same port the client
/// subscribes again.
#[tokio::test]
async fn calls_survive_the_management_server_going_away() {
    bounded("management server restart", async {
        let (a, mut server) = one_backend().await;
        let channel = xds_channel(&server);
        assert_eq!(tally(&channel, 5).await.len(), 1);
        let streams = server.streams_opened();

        server.stop().await;
        all_served_by(&channel, 20, a.addr).await;

        server.restart().await.expect("restart on the same port");
        let resubscribed = comes_true(|| server.streams_opened() > streams).await;
        assert!(resubscribed, "the client never opened a new ADS stream");
        all_served_by(&channel, 10, a.addr).await;
    })
    .await;
}

/// 10b. The management server is unreachable (A57): the first channel's calls fail UNAVAILABLE at once,
/// and so do those of a channel built afterwards, which shares the failing ADS stream: its watches get
/// the stream's error when they start, not at the next stream attempt (the backoff, 1 s and more). The
/// calls' 500 ms deadline is shorter than any backoff, so the code tells which: DEADLINE_EXCEEDED had
/// the channel waited for the next attempt (the clock is paused; the sockets are real).
#[tokio::test(start_paused = true)]
async fn a_channel_built_while_the_management_server_is_unreachable_fails_at_once() {
    bounded("unreachable management server", async {
        let (_held, dead) = reserved_port();
        let within = Duration::from_millis(500);
        let call = |channel: grpc_channel::Channel| async move {
            channel
                .unary::<_, interop_proto::SimpleResponse>(
                    paths::UNARY_CALL,
                    Request::new(interop_proto::SimpleRequest::default()).with_timeout(within),
                )
                .await
                .map(drop)
        };
        let first = xds_channel_at(&dead.to_string(), &[]);
        let status = call(first.clone()).await.expect_err("no management server");
        assert_eq!(
            status.code(),
            Code::Unavailable,
            "first channel: {status:?}"
        );

        let second = xds_channel_at(&dead.to_string(), &[]);
        let status = call(second.clone())
            .await
            .expect_err("no management server");
        assert_eq!(
            status.code(),
            Code::Unavailable,
            "a channel built while the ADS stream is down: {status:?}"
        );
        assert!(status.message().contains("xDS"), "{status:?}");
        drop(first);
    })
    .await;
}

/// 11. A cluster the route names is deleted (CDS) with `fail_on_data_errors`: its calls fail UNAVAILABLE
/// rather than queue (A28), while a route to a remaining cluster keeps working. (Under A88's default the
/// deletion is ambient and the cluster stays, see 9a for the Listener.)
#[tokio::test]
async fn a_deleted_cluster_fails_its_calls_unavailable() {
    bounded("CDS deletion", async {
        let (a, b, server) = two_backends().await;
        publish_tenant_routes(&server, a.addr, b.addr);
        let channel = xds_channel_with_features(&server, &["fail_on_data_errors"]);
        let blue = unary_served_by(&channel, &[("x-tenant", "blue")]).await;
        assert_eq!(blue.ok(), Some(a.addr.to_string()));

        // Only "other" remains.
        server.set(
            type_url::CLUSTER,
            vec![named("other", type_url::CLUSTER, &eds_cluster("other"))],
        );
        let mut gone = None;
        for _ in 0..500 {
            match unary_served_by(&channel, &[("x-tenant", "blue")]).await {
                Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                Err(status) => {
                    gone = Some(status);
                    break;
                }
            }
        }
        let status = gone.expect("calls to the deleted cluster fail");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        let other = unary_served_by(&channel, &[]).await;
        assert_eq!(other.ok(), Some(b.addr.to_string()));
    })
    .await;
}

/// 12. No virtual host matches the target's name: calls fail UNAVAILABLE (a resolver error, A28).
#[tokio::test]
async fn no_matching_virtual_host_fails_calls_unavailable() {
    bounded("no virtual host", async {
        let a = interop_server_handle().await;
        let server = management_server().await;
        publish(
            &server,
            &["other.test"],
            vec![route_to_cluster(&RouteMatchSpec::any(), "c")],
            &[("c", locality(&[a.addr]))],
        );
        let channel = xds_channel(&server);
        let status = served_by(&channel, CALL)
            .await
            .expect_err("no virtual host for svc.test");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    })
    .await;
}

/// 13. Weighted localities: two localities of weights 3 and 1 (one backend each) at the same priority
/// share 400 calls about 3:1 (the first between 65 % and 85 %).
#[tokio::test]
async fn locality_weights_split_calls() {
    bounded("locality weights", async {
        let (a, b, server) = two_backends().await;
        let mut heavy = LocalitySpec::new("z-heavy", &[a.addr]);
        heavy.weight = 3;
        let light = LocalitySpec::new("z-light", &[b.addr]);
        publish_to(&server, "weighted", vec![heavy, light]);
        let channel = xds_channel(&server);
        let counts = tally(&channel, 400).await;
        assert_share(&counts, 400, a.addr, 0.65..=0.85, "the weight-3 locality");
    })
    .await;
}

/// 14. EDS `drop_overloads` of 100 %: every call fails UNAVAILABLE at the pick, none reaches the backend,
/// and a route retry policy on UNAVAILABLE does not retry drops (A32).
#[tokio::test]
async fn a_full_drop_overload_fails_every_call_without_retries() {
    use envoy_types::pb::envoy::config::endpoint::v3::cluster_load_assignment::policy::DropOverload;
    use envoy_types::pb::envoy::config::endpoint::v3::cluster_load_assignment::Policy;
    use envoy_types::pb::envoy::r#type::v3::fractional_percent::DenominatorType;
    use envoy_types::pb::envoy::r#type::v3::FractionalPercent;

    bounded("drop_overloads", async {
        let (backend, server) = retrying_to_faulty("dropping", 3).await;
        let mut cla = assignment("dropping", &locality(&[backend.addr]));
        cla.policy = Some(Policy {
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
            vec![named("dropping", type_url::ENDPOINTS, &cla)],
        );
        let channel = xds_channel(&server);
        for i in 0..10 {
            let key = format!("dropped-{i}");
            let status = flaky_unary(&channel, &key, &[])
                .await
                .expect_err("every call is dropped");
            assert_eq!(status.code(), Code::Unavailable, "call {i}: {status:?}");
            assert!(
                status.message().contains("drop"),
                "call {i} failed, but not as a drop: {status:?}"
            );
            assert_eq!(
                status.previous_rpc_attempts(),
                0,
                "a drop is not retried: {status:?}"
            );
            assert!(
                attempts(&[&backend], &key).is_empty(),
                "call {i} reached the backend"
            );
        }
    })
    .await;
}

/// 15. A route's `max_stream_duration` (A31) caps the call's deadline: a server-streaming call whose
/// responses come 1 s apart ends DEADLINE_EXCEEDED under a 200 ms limit.
#[tokio::test]
async fn a_route_max_stream_duration_caps_the_deadline() {
    use envoy_types::pb::envoy::config::route::v3::route::Action;
    use envoy_types::pb::envoy::config::route::v3::route_action::MaxStreamDuration;

    bounded("max_stream_duration", async {
        let a = interop_server_handle().await;
        let server = management_server().await;
        let mut route = route_to_cluster(&RouteMatchSpec::any(), "slow");
        if let Some(Action::Route(action)) = &mut route.action {
            action.max_stream_duration = Some(MaxStreamDuration {
                max_stream_duration: Some(envoy_types::pb::google::protobuf::Duration {
                    seconds: 0,
                    nanos: 200_000_000,
                }),
                ..Default::default()
            });
        }
        publish(
            &server,
            &["*"],
            vec![route],
            &[("slow", locality(&[a.addr]))],
        );
        let channel = xds_channel(&server);
        // The config is in place once an ordinary call succeeds.
        assert!(served_by(&channel, CALL).await.is_ok());
        let request = interop_proto::StreamingOutputCallRequest {
            response_parameters: (0..3)
                .map(|_| interop_proto::ResponseParameters {
                    size: 10,
                    interval_us: 1_000_000,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let outcome = tokio::time::timeout(CALL, async {
            let mut stream = channel
                .server_streaming::<_, interop_proto::StreamingOutputCallResponse>(
                    paths::STREAMING_OUTPUT_CALL,
                    Request::new(request),
                )
                .await?
                .into_inner();
            let mut n = 0;
            while stream.message().await?.is_some() {
                n += 1;
            }
            Ok::<usize, Status>(n)
        })
        .await
        .expect("the limit ends the call");
        let status =
            outcome.expect_err("the 200 ms limit ends the call before its 3 s of responses");
        assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    })
    .await;
}

/// 16. Circuit breaking (A32): a cluster with `max_requests: 1` fails a second concurrent call UNAVAILABLE
/// ("circuit breaker drop") while the first is in flight, and takes calls again once it ended. The held
/// call is a server stream past its response headers: A32 releases the place at the call's end, not
/// when the call commits.
#[tokio::test]
async fn max_requests_fails_calls_over_the_limit() {
    use envoy_types::pb::envoy::config::cluster::v3::circuit_breakers::Thresholds;
    use envoy_types::pb::envoy::config::cluster::v3::CircuitBreakers;
    use envoy_types::pb::envoy::config::core::v3::RoutingPriority;
    use envoy_types::pb::google::protobuf::UInt32Value;

    bounded("circuit breaking", async {
        let (a, server) = one_backend_in("narrow").await;
        let mut cluster = eds_cluster("narrow");
        cluster.circuit_breakers = Some(CircuitBreakers {
            thresholds: vec![Thresholds {
                priority: RoutingPriority::Default as i32,
                max_requests: Some(UInt32Value { value: 1 }),
                ..Default::default()
            }],
            ..Default::default()
        });
        server.set(
            type_url::CLUSTER,
            vec![named("narrow", type_url::CLUSTER, &cluster)],
        );
        let channel = xds_channel(&server);
        assert!(served_by(&channel, CALL).await.is_ok());

        let mut held = slow_stream(&channel, 2, Duration::from_millis(500)).await;
        let over = served_by(&channel, CALL)
            .await
            .expect_err("a second call over max_requests 1");
        assert_eq!(over.code(), Code::Unavailable, "{over:?}");
        assert!(
            over.message().contains("circuit breaker"),
            "not the breaker: {over:?}"
        );
        // The held call ends normally; then the cluster takes calls again.
        if let (_, Some(status)) = drain(&mut held, "the held call goes on").await {
            panic!("the held call failed: {status:?}");
        }
        let again = call_until(&channel, "calls pass the breaker again", Result::is_ok).await;
        assert_eq!(again.ok(), Some(a.addr.to_string()));
    })
    .await;
}

/// 17. Priority recovery: priority 0 is down at first, so calls go to priority 1; once a backend listens
/// on priority 0's address, calls move back to it (its subchannel reconnects after its backoff).
#[tokio::test]
async fn calls_return_to_the_first_priority_when_it_recovers() {
    bounded("priority recovery", async {
        let (held, p0_addr) = reserved_port();
        let live = interop_server_handle().await;
        let server = management_server().await;
        let p0 = LocalitySpec::new("z-first", &[p0_addr]);
        let mut p1 = LocalitySpec::new("z-second", &[live.addr]);
        p1.priority = 1;
        publish_to(&server, "prioritized", vec![p0, p1]);
        let channel = xds_channel(&server);
        let first = served_by(&channel, CALL).await;
        assert_eq!(first.ok(), Some(live.addr.to_string()));

        drop(held);
        let recovered = interop::server::start(p0_addr)
            .await
            .expect("a backend on priority 0's address");
        let back = call_until(&channel, "calls return to priority 0", |r| {
            r.as_ref().ok() == Some(&recovered.addr.to_string())
        })
        .await;
        assert!(back.is_ok());
    })
    .await;
}

/// 18. A44's edges: a code not in `retry_on` is not retried, and a route policy with `num_retries: 0` is
/// NACKed (the RouteConfiguration keeps its last good version, so calls still retry under it).
#[tokio::test]
async fn retry_on_limits_the_codes_and_zero_retries_is_nacked() {
    bounded("A44 edges", async {
        let (backend, server) = retrying_to_faulty("flaky", 2).await;
        let channel = xds_channel(&server);
        let internal = flaky_unary(
            &channel,
            "not-retried",
            &[("x-fail-times", "1"), ("x-fail-code", "13")],
        )
        .await
        .expect_err("INTERNAL is not in retry_on");
        assert_eq!(internal.code(), Code::Internal, "{internal:?}");
        assert_eq!(attempts(&[&backend], "not-retried").len(), 1);

        server.set(
            type_url::ROUTE,
            vec![named(
                ROUTES,
                type_url::ROUTE,
                &route_configuration(ROUTES, &["*"], vec![retry_route("flaky", 0)]),
            )],
        );
        let nack = server
            .wait_for_request(Duration::from_secs(10), |r| {
                r.type_url == type_url::ROUTE && r.error_detail.is_some()
            })
            .await
            .expect("num_retries 0 is NACKed");
        assert_eq!(nack.version_info, "1", "{nack:?}");
        let retried = flaky_unary(&channel, "still-retried", &[("x-fail-times", "2")])
            .await
            .expect("the last good policy still retries");
        assert_eq!(retried.previous_rpc_attempts(), 2);
    })
    .await;
}
