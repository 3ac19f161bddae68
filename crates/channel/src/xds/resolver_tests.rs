//! The `xds:` resolver end to end on loopback: the test management server gives a Listener with inline
//! routes, a Cluster and its endpoints (two interop servers), and calls reach both.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::config::listener::v3::{ApiListener, Listener};
use envoy_types::pb::envoy::config::route::v3::{
    route::Action, route_action::ClusterSpecifier, route_match::PathSpecifier, Route, RouteAction,
    RouteConfiguration, RouteMatch, VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, http_filter::ConfigType, HttpConnectionManager,
    HttpFilter,
};
use envoy_types::pb::google::protobuf::Any;
use interop::xds_resources::{assignment, eds_cluster, named, type_url, LocalitySpec};
use interop::xds_server::ManagementServer;
use prost::{Message, Name};

use crate::{Channel, Request};

fn any<T: Message + Name>(m: &T) -> Any {
    Any {
        type_url: T::type_url(),
        value: m.encode_to_vec(),
    }
}

/// A Listener whose routes (inline) send every call to `cluster`.
fn listener(name: &str, cluster: &str) -> Listener {
    let routes = RouteConfiguration {
        name: "routes".to_owned(),
        virtual_hosts: vec![VirtualHost {
            name: "all".to_owned(),
            domains: vec!["*".to_owned()],
            routes: vec![Route {
                r#match: Some(RouteMatch {
                    path_specifier: Some(PathSpecifier::Prefix(String::new())),
                    ..Default::default()
                }),
                action: Some(Action::Route(RouteAction {
                    cluster_specifier: Some(ClusterSpecifier::Cluster(cluster.to_owned())),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let hcm = HttpConnectionManager {
        route_specifier: Some(RouteSpecifier::RouteConfig(routes)),
        http_filters: vec![HttpFilter {
            name: "router".to_owned(),
            config_type: Some(ConfigType::TypedConfig(any(&Router::default()))),
            ..Default::default()
        }],
        ..Default::default()
    };
    Listener {
        name: name.to_owned(),
        api_listener: Some(ApiListener {
            api_listener: Some(any(&hcm)),
        }),
        ..Default::default()
    }
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
    let a = interop::server::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("backend a");
    let b = interop::server::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("backend b");
    let xds = ManagementServer::start().await.expect("management server");
    xds.set(
        type_url::LISTENER,
        vec![named("svc", type_url::LISTENER, &listener("svc", "c1"))],
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
