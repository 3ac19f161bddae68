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
    let a = interop::server::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("backend a");
    let b = interop::server::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("backend b");
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
