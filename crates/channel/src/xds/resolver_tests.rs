//! The `xds:` resolver end to end on loopback: the test management server gives a Listener with inline
//! routes, a Cluster and its endpoints (two interop servers), and calls reach both.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use interop::xds_resources::{
    assignment, eds_cluster, inline_listener, named, route_configuration, route_to_cluster,
    type_url, LocalitySpec, RouteMatchSpec,
};
use interop::xds_server::ManagementServer;

use crate::{Channel, Request};

/// An interop server on a free loopback port.
async fn backend(what: &str) -> interop::server::ServerHandle {
    interop::server::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect(what)
}

async fn server_id(channel: &Channel) -> Result<String, crate::Status> {
    let request = interop_proto::SimpleRequest {
        fill_server_id: true,
        ..Default::default()
    };
    let response = channel
        .unary::<_, interop_proto::SimpleResponse>(
            interop_proto::paths::UNARY_CALL,
            Request::new(request).with_timeout(Duration::from_secs(10)),
        )
        .await?;
    Ok(response.into_inner().server_id)
}

#[tokio::test]
async fn calls_follow_listener_routes_cluster_and_endpoints() {
    let a = backend("backend a").await;
    let b = backend("backend b").await;
    let xds = ManagementServer::start().await.expect("management server");
    xds.set(
        type_url::LISTENER,
        vec![named(
            "svc",
            type_url::LISTENER,
            &inline_listener(
                "svc",
                route_configuration(
                    "routes",
                    &["*"],
                    vec![route_to_cluster(&RouteMatchSpec::any(), "c1")],
                ),
            ),
        )],
    );
    xds.set(
        type_url::CLUSTER,
        vec![named("c1", type_url::CLUSTER, &eds_cluster("c1"))],
    );
    xds.set(
        type_url::ENDPOINTS,
        vec![named(
            "c1",
            type_url::ENDPOINTS,
            &assignment("c1", &[LocalitySpec::new("z1", &[a.addr, b.addr])]),
        )],
    );
    let channel = Channel::builder("xds:///svc")
        .xds_bootstrap(xds.bootstrap_json())
        .build()
        .expect("channel");
    let mut seen = BTreeSet::new();
    for _ in 0..20 {
        seen.insert(server_id(&channel).await.expect("call"));
    }
    assert_eq!(seen.len(), 2, "both endpoints served: {seen:?}");
}

/// Publishes a Listener whose inline routes send every call to `cluster`.
fn route_all_to(xds: &ManagementServer, cluster: &str) {
    xds.set(
        type_url::LISTENER,
        vec![named(
            "svc",
            type_url::LISTENER,
            &inline_listener(
                "svc",
                route_configuration(
                    "routes",
                    &["*"],
                    vec![route_to_cluster(&RouteMatchSpec::any(), cluster)],
                ),
            ),
        )],
    );
}

#[tokio::test]
async fn calls_routed_to_a_new_cluster_wait_for_the_balancer_to_have_it() {
    let a = backend("backend a").await;
    let b = backend("backend b").await;
    let xds = ManagementServer::start().await.expect("management server");
    xds.set(
        type_url::CLUSTER,
        vec![
            named("c1", type_url::CLUSTER, &eds_cluster("c1")),
            named("c2", type_url::CLUSTER, &eds_cluster("c2")),
        ],
    );
    xds.set(
        type_url::ENDPOINTS,
        vec![
            named(
                "c1",
                type_url::ENDPOINTS,
                &assignment("c1", &[LocalitySpec::new("z1", &[a.addr])]),
            ),
            named(
                "c2",
                type_url::ENDPOINTS,
                &assignment("c2", &[LocalitySpec::new("z1", &[b.addr])]),
            ),
        ],
    );
    let channel = Channel::builder("xds:///svc")
        .xds_bootstrap(xds.bootstrap_json())
        .build()
        .expect("channel");
    for round in 0..10 {
        let (cluster, backend) = if round % 2 == 0 {
            ("c1", &a)
        } else {
            ("c2", &b)
        };
        route_all_to(&xds, cluster);
        // Calls right after the switch may take either routing, and none fails.
        let wanted = backend.addr.to_string();
        let mut last = String::new();
        for _ in 0..500 {
            last = server_id(&channel)
                .await
                .expect("no call fails across a route change");
            if last == wanted {
                break;
            }
        }
        assert_eq!(last, wanted, "round {round}");
    }
}

#[tokio::test]
async fn a_listener_gone_makes_the_channel_transient_failure() {
    let a = backend("backend").await;
    let xds = ManagementServer::start().await.expect("management server");
    xds.set(
        type_url::CLUSTER,
        vec![named("c1", type_url::CLUSTER, &eds_cluster("c1"))],
    );
    xds.set(
        type_url::ENDPOINTS,
        vec![named(
            "c1",
            type_url::ENDPOINTS,
            &assignment("c1", &[LocalitySpec::new("z1", &[a.addr])]),
        )],
    );
    route_all_to(&xds, "c1");
    let bootstrap = xds
        .bootstrap_json()
        .replace(r#""xds_v3""#, r#""xds_v3","fail_on_data_errors""#);
    let channel = Channel::builder("xds:///svc")
        .xds_bootstrap(bootstrap)
        .build()
        .expect("channel");
    server_id(&channel).await.expect("a first call");
    assert_eq!(channel.state(), crate::ConnectivityState::Ready);
    xds.set(type_url::LISTENER, Vec::new());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut state = channel.state();
    while state != crate::ConnectivityState::TransientFailure {
        state = channel.wait_for_state_change(state, deadline).await;
        assert!(tokio::time::Instant::now() < deadline, "still {state:?}");
    }
    let status = server_id(&channel).await.expect_err("the listener is gone");
    assert_eq!(status.code(), crate::Code::Unavailable, "{status:?}");
}
