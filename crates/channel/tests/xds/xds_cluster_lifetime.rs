//! gRFC A28's cluster lifetime end to end: a call keeps the cluster its route chose until it commits (a
//! wait-for-ready call waiting for it, a retry after a pushback), even once the routes no longer name it,
//! and the channel lets the cluster go when the last such call has committed or ended. The management
//! server (`interop::xds_server`) and the backends are on loopback; the test is bounded
//! (`support::xds::BOUND`), and its waits are bounded polling loops.

#![cfg(feature = "xds")]

use grpc_test_support as support;

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use grpc_channel::Request;
use interop::faulty::FaultyServer;
use interop::xds_resources::{
    named, route_configuration, route_to_cluster, type_url, with_retry_policy, RouteMatchSpec,
};
use interop_proto::paths;
use support::flaky::{attempts, flaky_unary};
use support::reserved_port;
use support::xds::{
    bounded, call_until, locality, management_server, publish, set_routes, slow_stream, tally,
    xds_channel, NAME, ROUTES,
};

/// Replaces the RouteConfiguration [`ROUTES`] with one sending every call to `cluster`.
fn route_all_to(server: &interop::xds_server::ManagementServer, cluster: &str) {
    set_routes(
        server,
        &[NAME],
        vec![route_to_cluster(&RouteMatchSpec::any(), cluster)],
    );
}

/// Whether `r` is a CDS subscription naming `cluster`.
fn cds_names(r: &DiscoveryRequest, cluster: &str) -> bool {
    r.type_url == type_url::CLUSTER && r.resource_names.iter().any(|n| n == cluster)
}

/// The routes send every call to cluster X, whose only endpoint is not up yet; a wait-for-ready call is
/// routed to X and waits. The routes then switch to cluster Y only: new calls go to Y, and the call on X
/// still completes, on X, once X's endpoint comes up (before, X left the cluster manager at once and the
/// call waited for a cluster nobody served until its deadline). While it runs, the channel keeps watching
/// X; once it ended, the channel's CDS subscription drops X.
#[tokio::test]
async fn a_call_keeps_its_cluster_after_the_routes_drop_it_and_the_cluster_goes_when_it_ends() {
    bounded("cluster lifetime", async {
        let y = support::interop_server_handle().await;
        let (held, x_addr) = reserved_port();
        let server = management_server().await;
        publish(
            &server,
            &[NAME],
            vec![route_to_cluster(&RouteMatchSpec::any(), "cluster-x")],
            &[
                ("cluster-x", locality(&[x_addr])),
                ("cluster-y", locality(&[y.addr])),
            ],
        );
        let channel = xds_channel(&server);
        // The channel routes calls to X (which fails them: nothing listens there).
        let _ = call_until(
            &channel,
            "a call routed to X fails",
            |outcome| matches!(outcome, Err(s) if s.message().contains("cluster-x")),
        )
        .await;
        // A wait-for-ready call, routed now (its first poll) to X, where it waits.
        let ch = channel.clone();
        let mut on_x = Box::pin(async move {
            let request = interop_proto::SimpleRequest {
                fill_server_id: true,
                ..interop_proto::SimpleRequest::default()
            };
            ch.unary::<_, interop_proto::SimpleResponse>(
                paths::UNARY_CALL,
                Request::new(request)
                    .with_wait_for_ready(true)
                    .with_timeout(Duration::from_secs(15)),
            )
            .await
            .map(|r| r.into_inner().server_id)
        });
        let first = std::future::poll_fn(|cx| Poll::Ready(on_x.as_mut().poll(cx))).await;
        assert!(first.is_pending(), "the call on X ended at once: {first:?}");
        let on_x = tokio::spawn(on_x);

        // The routes now name Y only: new calls go there.
        route_all_to(&server, "cluster-y");
        let y_id = y.addr.to_string();
        let _ = call_until(&channel, "a call goes to Y", |o| {
            o.as_ref().ok() == Some(&y_id)
        })
        .await;
        let counts = tally(&channel, 10).await;
        assert_eq!(counts.get(&y_id).copied(), Some(10), "{counts:?}");
        // The channel subscribed to Y, and still to X (the call on X runs).
        let requests = server.requests();
        assert!(
            requests.iter().any(|r| cds_names(r, "cluster-y")),
            "no CDS subscription to Y: {requests:?}"
        );
        assert!(
            !requests
                .iter()
                .any(|r| cds_names(r, "cluster-y") && !cds_names(r, "cluster-x")),
            "X's CDS watch dropped while a call still uses X: {requests:?}"
        );

        // X's endpoint comes up: the call on X completes there.
        drop(held);
        let x = interop::server::start(x_addr)
            .await
            .expect("backend X on its reserved port");
        let served = on_x.await.expect("the call's task");
        match served {
            Ok(id) => assert_eq!(id, x.addr.to_string(), "the call routed to X"),
            Err(status) => panic!("the call routed to X failed: {status:?}"),
        }

        // The last call on X ended: the channel lets X go (its CDS subscription names Y only).
        let dropped = server
            .wait_for_request(Duration::from_secs(5), |r| {
                cds_names(r, "cluster-y") && !cds_names(r, "cluster-x")
            })
            .await;
        assert!(
            dropped.is_some(),
            "X's CDS watch kept after its last call: {:?}",
            server.requests()
        );
        let counts = tally(&channel, 10).await;
        assert_eq!(counts.get(&y_id).copied(), Some(10), "{counts:?}");
    })
    .await;
}

/// A28: the cluster is chosen once per call, so a retry goes to the call's cluster even once the routes
/// send new calls elsewhere. The route to X retries UNAVAILABLE; the call's first attempt on X fails with
/// a 2 s pushback, during which the routes switch to Y (new calls land on Y); the retry still goes to X and
/// succeeds there, and Y never sees the call (before, X left the cluster manager at once and the retry
/// failed to pick).
#[tokio::test]
async fn a_retry_after_the_routes_change_goes_to_the_calls_cluster() {
    bounded("retry on the call's cluster", async {
        let x = FaultyServer::start().await.expect("backend X");
        let y = FaultyServer::start().await.expect("backend Y");
        let server = management_server().await;
        publish(
            &server,
            &[NAME],
            vec![with_retry_policy(
                route_to_cluster(&RouteMatchSpec::any(), "cluster-x"),
                "unavailable",
                2,
            )],
            &[
                ("cluster-x", locality(&[x.addr])),
                ("cluster-y", locality(&[y.addr])),
            ],
        );
        let channel = xds_channel(&server);
        let ch = channel.clone();
        let call = tokio::spawn(async move {
            flaky_unary(
                &ch,
                "retried",
                &[("x-fail-times", "1"), ("x-pushback-ms", "2000")],
            )
            .await
        });
        // The first attempt failed on X.
        for _ in 0..500 {
            if !attempts(&[&x], "retried").is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            attempts(&[&x], "retried").len(),
            1,
            "the first attempt on X"
        );

        route_all_to(&server, "cluster-y");
        let mut on_y = false;
        for i in 0..200 {
            let key = format!("probe-{i}");
            flaky_unary(&channel, &key, &[])
                .await
                .expect("a probe call succeeds");
            if !attempts(&[&y], &key).is_empty() {
                on_y = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(on_y, "new calls never went to Y");
        // The retry (after the pushback) goes to X, where it succeeds.
        let response = call.await.expect("the call's task");
        let response = match response {
            Ok(r) => r,
            Err(status) => panic!("the retried call failed: {status:?}"),
        };
        assert_eq!(response.previous_rpc_attempts(), 1);
        assert_eq!(
            attempts(&[&x], "retried"),
            vec![(1, None), (2, Some("1".to_owned()))],
            "both attempts on X"
        );
        assert!(
            attempts(&[&y], "retried").is_empty(),
            "an attempt of the call went to Y"
        );
    })
    .await;
}

/// A committed call no longer holds its cluster (`shared/spec/beyond-a6.md`: refcounts until commit): a
/// server-streaming call on X has its first response (committed) when the routes switch to Y; the channel
/// drops X's CDS watch while the stream still runs, and the stream finishes on its connection.
#[tokio::test]
async fn a_committed_call_lets_its_cluster_go_and_still_finishes() {
    bounded("committed call", async {
        let x = support::interop_server_handle().await;
        let y = support::interop_server_handle().await;
        let server = management_server().await;
        publish(
            &server,
            &[NAME],
            vec![route_to_cluster(&RouteMatchSpec::any(), "cluster-x")],
            &[
                ("cluster-x", locality(&[x.addr])),
                ("cluster-y", locality(&[y.addr])),
            ],
        );
        let channel = xds_channel(&server);
        // 30 responses 100 ms apart (3 s); the first has arrived, so the call has committed.
        let mut stream = slow_stream(&channel, 30, Duration::from_millis(100)).await;

        route_all_to(&server, "cluster-y");
        let dropped = server
            .wait_for_request(Duration::from_secs(2), |r| {
                cds_names(r, "cluster-y") && !cds_names(r, "cluster-x")
            })
            .await;
        assert!(
            dropped.is_some(),
            "X's CDS watch kept by a committed call: {:?}",
            server.requests()
        );
        let mut rest = 0;
        loop {
            match tokio::time::timeout(Duration::from_secs(10), stream.message())
                .await
                .expect("the stream goes on")
            {
                Ok(Some(_)) => rest += 1,
                Ok(None) => break,
                Err(status) => panic!("the stream on X failed after X went: {status:?}"),
            }
        }
        assert_eq!(rest, 29, "every response arrives");
    })
    .await;
}

/// A RouteConfiguration update that leaves no virtual host for the channel's name fails the channel for
/// new calls (A27), but a committed stream on cluster X goes on over its connection, as it does when the
/// routes merely stop naming X (grpc-go reports the error and keeps the balancer; A28 keeps a cluster
/// while calls use it): every response still arrives.
#[tokio::test]
async fn a_committed_stream_survives_the_routes_losing_the_channel_s_virtual_host() {
    bounded("committed stream, virtual host gone", async {
        let x = support::interop_server_handle().await;
        let server = management_server().await;
        publish(
            &server,
            &[NAME],
            vec![route_to_cluster(&RouteMatchSpec::any(), "cluster-x")],
            &[("cluster-x", locality(&[x.addr]))],
        );
        let channel = xds_channel(&server);
        // 30 responses 100 ms apart (3 s); the first has arrived, so the call has committed.
        let mut stream = slow_stream(&channel, 30, Duration::from_millis(100)).await;

        server.set(
            type_url::ROUTE,
            vec![named(
                ROUTES,
                type_url::ROUTE,
                &route_configuration(
                    ROUTES,
                    &["elsewhere.example"],
                    vec![route_to_cluster(&RouteMatchSpec::any(), "cluster-x")],
                ),
            )],
        );
        server
            .wait_for_request(Duration::from_secs(2), |r| {
                r.type_url == type_url::ROUTE && r.version_info == "2"
            })
            .await
            .expect("the client ACKs the routes without the channel's virtual host");
        let mut rest = 0;
        loop {
            match tokio::time::timeout(Duration::from_secs(10), stream.message())
                .await
                .expect("the stream goes on")
            {
                Ok(Some(_)) => rest += 1,
                Ok(None) => break,
                Err(status) => {
                    panic!("the committed stream was cut after {rest} more responses: {status:?}")
                }
            }
        }
        assert_eq!(rest, 29, "every response arrives");
    })
    .await;
}
